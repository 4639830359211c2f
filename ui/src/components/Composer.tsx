/**
 * The message box: Enter sends, Shift+Enter adds a line (IME composition is respected), the
 * box grows with its text; while an answer streams, Send becomes Stop. Images (and audio clips,
 * for a model that hears) are attached with the button, pasted or dropped; each waits as a
 * preview (its size shown, removable) until sent. Documents (PDF, DOCX, text) taken the same
 * ways go to the conversation at once (`onDocuments`), to be read while the user types. A
 * message the node refuses comes back into the box, words and files.
 */
import { useLayoutEffect, useRef, useState, type ClipboardEvent, type DragEvent, type FormEvent, type KeyboardEvent } from 'react';
import { AUDIO_TYPES, filesOf, IMAGE_TYPES, kindOf, readAttachment, screenFiles, type Attachment } from '../chat/attachments';
import { DOCUMENT_ACCEPT, isDocument } from '../chat/documents';
import { formatBytes } from '../format';
import { CloseIcon, ImageIcon, SendIcon, StopIcon } from './icons';
import './Images.css';

/** The box grows up to this height (px), then scrolls. */
const MAX_HEIGHT_PX = 200;

export interface ComposerProps {
  busy: boolean;
  /** The conversation is still loading: typing is fine, sending waits. */
  disabled: boolean;
  hint: string | null;
  /** The model hears audio: clips may be attached. */
  hears: boolean;
  /** Resolves false when nothing of the message was kept: it goes back into the box. */
  onSend: (text: string, files: Attachment[]) => Promise<boolean>;
  /** Documents taken: they go to the conversation now, not with the message. */
  onDocuments: (files: File[]) => void;
  onStop: () => void;
  /** Changes when the conversation changes, to move the focus back to the box. */
  focusKey: string | null;
}

export function Composer({ busy, disabled, hint, hears, onSend, onDocuments, onStop, focusKey }: ComposerProps) {
  const [text, setText] = useState('');
  const [images, setImages] = useState<Attachment[]>([]);
  const [refusal, setRefusal] = useState<string | null>(null);
  const [dragging, setDragging] = useState(false);
  const area = useRef<HTMLTextAreaElement>(null);
  const picker = useRef<HTMLInputElement>(null);

  useLayoutEffect(() => {
    const el = area.current;
    if (!el) return;
    el.style.height = 'auto';
    el.style.height = `${Math.min(MAX_HEIGHT_PX, el.scrollHeight)}px`;
  }, [text]);

  useLayoutEffect(() => {
    area.current?.focus();
  }, [focusKey]);

  // Files taken but still being read (a second paste meanwhile counts them), and the
  // conversation on screen, for work that ends later.
  const reading = useRef({ count: 0, bytes: 0, clips: 0, clipBytes: 0 });
  const shown = useRef(focusKey);
  shown.current = focusKey;

  const attach = (all: File[]) => {
    const documents = all.filter((f) => kindOf(f) === null && isDocument(f));
    if (documents.length > 0) onDocuments(documents);
    const files = all.filter((f) => !documents.includes(f));
    if (files.length === 0) return;
    const sum = (kind: Attachment['kind'], list: { kind: Attachment['kind']; size: number }[]) => {
      const of = list.filter((a) => a.kind === kind);
      return { count: of.length, bytes: of.reduce((n, a) => n + a.size, 0) };
    };
    const [pics, clips] = [sum('image', images), sum('audio', images)];
    const r = reading.current;
    const { taken, refused } = screenFiles(
      files,
      { count: pics.count + r.count, bytes: pics.bytes + r.bytes, clips: clips.count + r.clips, clipBytes: clips.bytes + r.clipBytes },
      hears,
    );
    setRefusal(refused[0] ?? null);
    const kinds = taken.map((f) => ({ kind: kindOf(f) ?? 'image', size: f.size }));
    const [newPics, newClips] = [sum('image', kinds), sum('audio', kinds)];
    const these = { count: newPics.count, bytes: newPics.bytes, clips: newClips.count, clipBytes: newClips.bytes };
    const add = (a: typeof these, b: typeof these, sign: number) => ({
      count: a.count + sign * b.count,
      bytes: a.bytes + sign * b.bytes,
      clips: a.clips + sign * b.clips,
      clipBytes: a.clipBytes + sign * b.clipBytes,
    });
    reading.current = add(reading.current, these, 1);
    void Promise.all(taken.map(readAttachment))
      .then(
        (read) => setImages((current) => [...current, ...read]),
        (e: unknown) => setRefusal(e instanceof Error ? e.message : String(e)),
      )
      .finally(() => {
        reading.current = add(reading.current, these, -1);
      });
  };

  const empty = !text.trim() && images.length === 0;
  const submit = () => {
    if (busy || disabled || empty) return;
    const [sentText, sentImages, sentIn] = [text, images, focusKey];
    setText('');
    setImages([]);
    setRefusal(null);
    void onSend(sentText, sentImages).then((kept) => {
      // Refused: the words and images come back, to the same conversation (a first message
      // creates it: from none), unless the user has started another message.
      const same = shown.current === sentIn || sentIn === null;
      if (kept || !same) return;
      setText((now) => (now === '' ? sentText : now));
      setImages((now) => (now.length === 0 ? sentImages : now));
    });
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
  const onPaste = (e: ClipboardEvent<HTMLTextAreaElement>) => {
    const files = filesOf(e.clipboardData);
    if (files.length === 0) return;
    e.preventDefault();
    attach(files);
  };
  const onDragOver = (e: DragEvent<HTMLFormElement>) => {
    if (!Array.from(e.dataTransfer.types).includes('Files')) return;
    e.preventDefault();
    setDragging(true);
  };
  const onDrop = (e: DragEvent<HTMLFormElement>) => {
    setDragging(false);
    const files = filesOf(e.dataTransfer);
    if (files.length === 0) return;
    e.preventDefault();
    attach(files);
  };

  return (
    <form
      className={`composer${dragging ? ' dragging' : ''}`}
      onSubmit={onSubmit}
      onDragOver={onDragOver}
      onDragLeave={() => setDragging(false)}
      onDrop={onDrop}
    >
      {images.length > 0 && (
        <ul className="attachments" data-testid="attachments" aria-label="Files to send">
          {images.map((a) => (
            <li key={a.key} className={`attachment${a.kind === 'audio' ? ' audio' : ''}`} data-testid="attachment" data-kind={a.kind}>
              {a.kind === 'audio' ? (
                <audio src={a.dataUrl} controls preload="metadata" aria-label={a.name} title={a.name} />
              ) : (
                <img src={a.dataUrl} alt={a.name} />
              )}
              <span className="attachment-size">{formatBytes(a.size)}</span>
              <button
                type="button"
                className="attachment-remove"
                data-testid="attachment-remove"
                aria-label={`Remove ${a.name}`}
                title="Remove"
                onClick={() => setImages((now) => now.filter((b) => b.key !== a.key))}
              >
                <CloseIcon />
              </button>
            </li>
          ))}
        </ul>
      )}
      <div className="composer-box">
        <button
          type="button"
          className="icon-btn composer-attach"
          data-testid="attach-button"
          title={hears ? 'Attach documents, images or audio' : 'Attach documents or images'}
          aria-label={hears ? 'Attach documents, images or audio' : 'Attach documents or images'}
          onClick={() => picker.current?.click()}
        >
          <ImageIcon />
        </button>
        <input
          ref={picker}
          type="file"
          accept={[...(hears ? [...IMAGE_TYPES, ...AUDIO_TYPES, '.wav', '.mp3'] : IMAGE_TYPES), DOCUMENT_ACCEPT].join(',')}
          multiple
          hidden
          data-testid="attach-input"
          onChange={(e) => {
            attach(Array.from(e.target.files ?? []));
            e.target.value = '';
          }}
        />
        <textarea
          ref={area}
          data-testid="composer-input"
          value={text}
          rows={1}
          placeholder="Message Hearth…"
          aria-label="Message"
          onChange={(e) => setText(e.target.value)}
          onKeyDown={onKeyDown}
          onPaste={onPaste}
        />
        {busy ? (
          <button type="button" className="composer-btn stop" data-testid="stop-button" onClick={onStop} title="Stop (Esc)">
            <StopIcon />
            <span>Stop</span>
          </button>
        ) : (
          <button type="submit" className="composer-btn send" data-testid="send-button" disabled={disabled || empty} title="Send (Enter)">
            <SendIcon />
            <span>Send</span>
          </button>
        )}
      </div>
      <div className={`composer-hint${refusal ? ' refused' : ''}`} data-testid="composer-hint" role={refusal ? 'alert' : undefined}>
        {refusal ?? hint ?? `Enter to send · Shift+Enter for a new line · Esc to stop · paste or drop documents or images${hears ? ' or audio' : ''}`}
      </div>
    </form>
  );
}
