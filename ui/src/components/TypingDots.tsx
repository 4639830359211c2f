/**
 * The dots under an answer that has not begun: one lit at a time, moved by a timer three times
 * a second rather than a CSS animation, which WebKitGTK (the desktop window) runs every frame,
 * taking CPU from the model while it reads the prompt (src/animations.test.ts says more).
 */
import { useEffect, useState } from 'react';

export const TYPING_STEP_MS = 350;

/** The dot lit after `lit`, of three. */
export function nextDot(lit: number): number {
  return (lit + 1) % 3;
}

export function TypingDots() {
  const [lit, setLit] = useState(0);
  useEffect(() => {
    const timer = setInterval(() => setLit(nextDot), TYPING_STEP_MS);
    return () => clearInterval(timer);
  }, []);
  return (
    <div className="typing" aria-label="Generating" data-testid="typing">
      {[0, 1, 2].map((i) => (
        <span key={i} className={i === lit ? 'lit' : undefined} />
      ))}
    </div>
  );
}
