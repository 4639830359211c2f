/**
 * Images and audio clips the user attaches to a message (picked, pasted or dropped; clips only
 * for a model that hears): which files are taken, with the node's own limits checked here first
 * so the user learns at once, and their reading into data URLs, the form the chat request
 * carries them in. Stored files are fetched with the API key (an <img src> would not send it)
 * into object URLs kept while a view shows them, and a minute after.
 */
import { apiFetch, ApiError } from '../api/client';
import { formatBytes } from '../format';

/** The node's limits (hearth_protocol::media, the chat door): bytes an image, images a
 * message, and bytes of a message's images together. */
export const MAX_IMAGE_BYTES = 8 * 1024 * 1024;
export const MAX_IMAGES = 16;
export const MAX_MESSAGE_IMAGE_BYTES = 8 * 1024 * 1024;
/** The formats the node reads. */
export const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'];
/** The node's audio limits (hearth_protocol::audio, the chat door): bytes a clip, clips a
 * message, and bytes of a message's clips together. */
export const MAX_AUDIO_BYTES = 8 * 1024 * 1024;
export const MAX_CLIPS = 4;
export const MAX_MESSAGE_AUDIO_BYTES = 8 * 1024 * 1024;
/** The audio formats the node reads (WAV and MP3), under the names browsers give them. */
export const AUDIO_TYPES = ['audio/wav', 'audio/x-wav', 'audio/wave', 'audio/vnd.wave', 'audio/mpeg', 'audio/mp3'];

export type AttachmentKind = 'image' | 'audio';

/** What a file is to the node: an image, a clip (by its type, or its name when it has none). */
export function kindOf(f: FileFacts): AttachmentKind | null {
  if (IMAGE_TYPES.includes(f.type)) return 'image';
  if (AUDIO_TYPES.includes(f.type)) return 'audio';
  if (f.type === '' && /\.(wav|mp3)$/i.test(f.name)) return 'audio';
  return null;
}

/** A file waiting in the composer. */
export interface Attachment {
  /** Unique within the page, for React keys and removal. */
  key: string;
  kind: AttachmentKind;
  name: string;
  mime: string;
  size: number;
  /** The file as a data URL: the preview and what is sent. */
  dataUrl: string;
}

/** What the composer needs to know of a file to take it or refuse it. */
export interface FileFacts {
  name: string;
  type: string;
  size: number;
}

/** The attachments there already: images (`count`, `bytes`) and clips. */
export interface Already {
  count: number;
  bytes: number;
  clips?: number;
  clipBytes?: number;
}

/**
 * Which of `files` can join the attachments there already, and a sentence for each one
 * refused (the first refusal is what the composer shows). Clips are taken when the model
 * `hears`.
 */
export function screenFiles<F extends FileFacts>(
  files: F[],
  already: Already,
  hears = false,
): { taken: F[]; refused: string[] } {
  const taken: F[] = [];
  const refused: string[] = [];
  let bytes = already.bytes;
  let clips = already.clips ?? 0;
  let clipBytes = already.clipBytes ?? 0;
  for (const f of files) {
    const name = f.name || 'the pasted image';
    const kind = kindOf(f);
    if (kind === 'audio') {
      if (!hears) {
        refused.push(`${name} is audio, and this model cannot hear: its projector has no audio encoder.`);
      } else if (f.size > MAX_AUDIO_BYTES) {
        refused.push(`${name} is ${formatBytes(f.size)}; a clip may have at most ${formatBytes(MAX_AUDIO_BYTES)}.`);
      } else if (clips >= MAX_CLIPS) {
        refused.push(`A message carries at most ${MAX_CLIPS} audio clips.`);
      } else if (clipBytes + f.size > MAX_MESSAGE_AUDIO_BYTES) {
        refused.push(`${name} does not fit: a message's clips may have ${formatBytes(MAX_MESSAGE_AUDIO_BYTES)} together.`);
      } else {
        taken.push(f);
        clips += 1;
        clipBytes += f.size;
      }
      continue;
    }
    if (kind === null) {
      refused.push(
        hears
          ? `${name} is neither an image nor audio the node reads (PNG, JPEG, GIF, WebP; WAV, MP3).`
          : `${name} is not an image the node reads (PNG, JPEG, GIF or WebP).`,
      );
    } else if (f.size > MAX_IMAGE_BYTES) {
      refused.push(`${name} is ${formatBytes(f.size)}; an image may have at most ${formatBytes(MAX_IMAGE_BYTES)}.`);
    } else if (already.count + taken.filter((t) => kindOf(t) === 'image').length >= MAX_IMAGES) {
      refused.push(`A message carries at most ${MAX_IMAGES} images.`);
    } else if (bytes + f.size > MAX_MESSAGE_IMAGE_BYTES) {
      refused.push(`${name} does not fit: a message's images may have ${formatBytes(MAX_MESSAGE_IMAGE_BYTES)} together.`);
    } else {
      taken.push(f);
      bytes += f.size;
    }
  }
  return { taken, refused };
}

let counter = 0;

/** Reads a taken file into an attachment. */
export function readAttachment(file: File): Promise<Attachment> {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onerror = () => reject(reader.error ?? new Error(`Cannot read ${file.name}`));
    reader.onload = () =>
      resolve({
        key: `a${++counter}`,
        kind: kindOf(file) ?? 'image',
        name: file.name || 'pasted image',
        mime: file.type,
        size: file.size,
        dataUrl: String(reader.result),
      });
    reader.readAsDataURL(file);
  });
}

/**
 * The image files among what was pasted or dropped. A paste that carries text too (a table
 * from a spreadsheet comes with a picture of itself) is the text's: none.
 */
export function filesOf(data: DataTransfer | null): File[] {
  if (!data) return [];
  if (data.getData('text/plain') !== '') return [];
  const files = Array.from(data.files);
  if (files.length > 0) return files;
  // Some browsers list a pasted screenshot only among the items.
  return Array.from(data.items)
    .filter((item) => item.kind === 'file')
    .map((item) => item.getAsFile())
    .filter((f): f is File => f !== null);
}

/** A stored file's object URL and the views that show it now. */
interface Held {
  url: Promise<string>;
  views: number;
  release?: ReturnType<typeof setTimeout>;
}

const stored = new Map<string, Held>();

/**
 * How long a stored file's object URL outlives the last view of it: going back to a
 * conversation soon shows its pictures at once; after that their memory is given back.
 */
export const RELEASE_AFTER_MS = 60_000;

/** Where stored image `id` is served. */
export function storedImagePath(id: string): string {
  return `/api/images/${encodeURIComponent(id)}`;
}

/** Where stored audio clip `id` is served. */
export function storedAudioPath(id: string): string {
  return `/api/audio/${encodeURIComponent(id)}`;
}

/**
 * An object URL for the stored file at `path` (files never change), fetched once while any
 * view shows it, and `release` for the view that goes: the URL is revoked
 * [`RELEASE_AFTER_MS`] after the last one went, unless another came meanwhile.
 */
export function holdStoredFile(path: string): { url: Promise<string>; release: () => void } {
  let held = stored.get(path);
  if (!held) {
    const url = apiFetch(path).then(async (res) => {
      if (!res.ok) throw await ApiError.from(res);
      return URL.createObjectURL(await res.blob());
    });
    const fresh: Held = { url, views: 0 };
    // A failure is not kept: the next look tries again.
    url.catch(() => {
      if (stored.get(path) === fresh) stored.delete(path);
    });
    stored.set(path, fresh);
    held = fresh;
  }
  const h = held;
  h.views += 1;
  if (h.release !== undefined) {
    clearTimeout(h.release);
    h.release = undefined;
  }
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    h.views -= 1;
    if (h.views > 0) return;
    h.release = setTimeout(() => {
      if (stored.get(path) === h) stored.delete(path);
      h.url.then(
        (u) => URL.revokeObjectURL(u),
        () => undefined,
      );
    }, RELEASE_AFTER_MS);
  };
  return { url: h.url, release };
}
