// Every endless CSS animation of the UI moves in steps. The desktop app's window is WebKitGTK,
// which paints a smooth endless animation every frame in software: the typing dots under an
// answer that had not begun, beside the model reading a 2,200-token prompt, took 88 % of a core
// of the model's two, and with llama.cpp's two threads waiting on each other the prompt took
// about twice as long. A stepped one repaints a few times a second (WebKit still ticks it every
// frame, about a third of a core: the dots, shown the longest, are moved by a timer instead,
// components/TypingDots.tsx).
import { describe, expect, it } from 'vitest';

/** Every stylesheet under src/, by path, as text. */
const SHEETS = import.meta.glob<string>('./**/*.css', { query: '?raw', import: 'default', eager: true });

/** Each `animation` or `animation-*` declaration of a stylesheet, without its comments. */
function animations(css: string): string[] {
  const bare = css.replace(/\/\*[\s\S]*?\*\//g, '');
  return [...bare.matchAll(/(animation(?:-[a-z-]+)?)\s*:\s*([^;}]+)/g)].map((m) => `${m[1]}: ${m[2].trim()}`);
}

describe('animations', () => {
  const sheets = Object.entries(SHEETS);

  it('finds the stylesheets and their animations', () => {
    expect(sheets.some(([path]) => path === './styles.css')).toBe(true);
    expect(sheets.flatMap(([, css]) => animations(css)).length).toBeGreaterThan(3);
  });

  it('moves every endless one in steps', () => {
    const smooth = sheets.flatMap(([path, css]) =>
      animations(css)
        .filter((d) => /\binfinite\b/.test(d) && !/\bsteps\(/.test(d))
        .map((d) => `${path}: ${d}`),
    );
    expect(smooth).toEqual([]);
  });

  it('reads a smooth endless animation as one', () => {
    expect(animations('.a { animation: pulse 1s ease-in-out infinite; } /* animation: x infinite; */')).toEqual([
      'animation: pulse 1s ease-in-out infinite',
    ]);
    expect(animations('.a{animation-iteration-count:infinite}')).toEqual(['animation-iteration-count: infinite']);
  });
});
