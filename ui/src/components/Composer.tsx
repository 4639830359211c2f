/**
 * The message box: Enter sends, Shift+Enter adds a line (IME composition is respected), the
 * box grows with its text; while an answer streams, Send becomes Stop.
 */
import { useLayoutEffect, useRef, useState, type FormEvent, type KeyboardEvent } from 'react';
import { SendIcon, StopIcon } from './icons';

/** The box grows up to this height (px), then scrolls. */
const MAX_HEIGHT_PX = 200;

export interface ComposerProps {
  busy: boolean;
  /** The conversation is still loading: typing is fine, sending waits. */
  disabled: boolean;
  hint: string | null;
  onSend: (text: string) => void;
  onStop: () => void;
  /** Changes when the conversation changes, to move the focus back to the box. */
  focusKey: string | null;
}

export function Composer({ busy, disabled, hint, onSend, onStop, focusKey }: ComposerProps) {
  const [text, setText] = useState('');
  const area = useRef<HTMLTextAreaElement>(null);

  useLayoutEffect(() => {
    const el = area.current;
    if (!el) return;
    el.style.height = 'auto';
    el.style.height = `${Math.min(MAX_HEIGHT_PX, el.scrollHeight)}px`;
  }, [text]);

  useLayoutEffect(() => {
    area.current?.focus();
  }, [focusKey]);

  const submit = () => {
    if (busy || disabled || !text.trim()) return;
    onSend(text);
    setText('');
  };
  const onSubmit = (e: FormEvent) => {
    e.preventDefault();
    submit();
  };
  const onKeyDown = (e: KeyboardEvent<HTMLTextAreaElement>) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.nativeEvent.isComposing) {
      e.preventDefault();
      submit();
    }
  };

  return (
    <form className="composer" onSubmit={onSubmit}>
      <div className="composer-box">
        <textarea
          ref={area}
          data-testid="composer-input"
          value={text}
          rows={1}
          placeholder="Message Hearth…"
          aria-label="Message"
          onChange={(e) => setText(e.target.value)}
          onKeyDown={onKeyDown}
        />
        {busy ? (
          <button type="button" className="composer-btn stop" data-testid="stop-button" onClick={onStop} title="Stop (Esc)">
            <StopIcon />
            <span>Stop</span>
          </button>
        ) : (
          <button type="submit" className="composer-btn send" data-testid="send-button" disabled={disabled || !text.trim()} title="Send (Enter)">
            <SendIcon />
            <span>Send</span>
          </button>
        )}
      </div>
      <div className="composer-hint">{hint ?? 'Enter to send · Shift+Enter for a new line · Esc to stop'}</div>
    </form>
  );
}
