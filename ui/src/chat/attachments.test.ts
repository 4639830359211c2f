import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  holdStoredFile,
  MAX_AUDIO_BYTES,
  MAX_CLIPS,
  MAX_IMAGE_BYTES,
  MAX_IMAGES,
  MAX_MESSAGE_IMAGE_BYTES,
  RELEASE_AFTER_MS,
  screenFiles,
} from './attachments';

vi.mock('../api/client', () => ({
  apiFetch: vi.fn(async () => new Response(new Blob(['png bytes']))),
  ApiError: { from: async () => new Error('refused') },
}));

const file = (name: string, type: string, size = 1000) => ({ name, type, size });

describe('screenFiles', () => {
  it('takes the formats the node reads and says why it refuses the rest', () => {
    const { taken, refused } = screenFiles(
      [
        file('a.png', 'image/png'),
        file('b.jpg', 'image/jpeg'),
        file('c.webp', 'image/webp'),
        file('d.gif', 'image/gif'),
        file('report.pdf', 'application/pdf'),
        file('photo.heic', 'image/heic'),
        file('huge.png', 'image/png', MAX_IMAGE_BYTES + 1),
        file('', 'image/svg+xml'),
      ],
      { count: 0, bytes: 0 },
    );
    expect(taken.map((f) => f.name)).toEqual(['a.png', 'b.jpg', 'c.webp', 'd.gif']);
    expect(refused).toEqual([
      'report.pdf is not an image the node reads (PNG, JPEG, GIF or WebP).',
      'photo.heic is not an image the node reads (PNG, JPEG, GIF or WebP).',
      'huge.png is 8.0 MB; an image may have at most 8.0 MB.',
      'the pasted image is not an image the node reads (PNG, JPEG, GIF or WebP).',
    ]);
  });

  it('keeps a message within the node\'s count of images and their bytes together', () => {
    const files = [file('1.png', 'image/png'), file('2.png', 'image/png'), file('3.png', 'image/png')];
    const { taken, refused } = screenFiles(files, { count: MAX_IMAGES - 2, bytes: 0 });
    expect(taken.map((f) => f.name)).toEqual(['1.png', '2.png']);
    expect(refused).toEqual([`A message carries at most ${MAX_IMAGES} images.`]);
    expect(screenFiles(files, { count: 0, bytes: 0 }).taken).toHaveLength(3);
    const half = MAX_MESSAGE_IMAGE_BYTES / 2;
    const photos = [file('a.jpg', 'image/jpeg', half), file('b.jpg', 'image/jpeg', half), file('c.jpg', 'image/jpeg', 10)];
    const two = screenFiles(photos, { count: 0, bytes: 100 });
    expect(two.taken.map((f) => f.name)).toEqual(['a.jpg', 'c.jpg']);
    expect(two.refused).toEqual(['b.jpg does not fit: a message\'s images may have 8.0 MB together.']);
  });

  it('takes WAV and MP3 clips only for a model that hears, within the clip limits', () => {
    const clips = [file('a.wav', 'audio/wav'), file('b.mp3', 'audio/mpeg'), file('c.wav', '')];
    const deaf = screenFiles(clips, { count: 0, bytes: 0 });
    expect(deaf.taken).toEqual([]);
    expect(deaf.refused[0]).toBe('a.wav is audio, and this model cannot hear: its projector has no audio encoder.');
    const hears = screenFiles([...clips, file('d.ogg', 'audio/ogg'), file('x.png', 'image/png')], { count: 0, bytes: 0 }, true);
    expect(hears.taken.map((f) => f.name)).toEqual(['a.wav', 'b.mp3', 'c.wav', 'x.png']);
    expect(hears.refused).toEqual(['d.ogg is neither an image nor audio the node reads (PNG, JPEG, GIF, WebP; WAV, MP3).']);
    const full = screenFiles(clips, { count: 0, bytes: 0, clips: MAX_CLIPS - 1, clipBytes: 0 }, true);
    expect(full.taken.map((f) => f.name)).toEqual(['a.wav']);
    expect(full.refused[0]).toBe(`A message carries at most ${MAX_CLIPS} audio clips.`);
    const big = screenFiles([file('long.wav', 'audio/wav', MAX_AUDIO_BYTES + 1)], { count: 0, bytes: 0 }, true);
    expect(big.refused[0]).toBe('long.wav is 8.0 MB; a clip may have at most 8.0 MB.');
  });
});

describe('holdStoredFile', () => {
  afterEach(() => {
    vi.useRealTimers();
    vi.unstubAllGlobals();
  });

  it('fetches a file once while shown and gives its URL back a while after the last view', async () => {
    vi.useFakeTimers();
    let made = 0;
    const revoked: string[] = [];
    vi.stubGlobal('URL', {
      createObjectURL: () => `blob:${++made}`,
      revokeObjectURL: (u: string) => revoked.push(u),
    });
    const a = holdStoredFile('/api/images/i1');
    const b = holdStoredFile('/api/images/i1');
    expect(await a.url).toBe('blob:1');
    expect(await b.url).toBe('blob:1');
    a.release();
    a.release(); // twice is once
    await vi.advanceTimersByTimeAsync(RELEASE_AFTER_MS * 2);
    expect(revoked).toEqual([]);
    b.release();
    // Shown again before the delay: the same URL, never revoked.
    await vi.advanceTimersByTimeAsync(RELEASE_AFTER_MS / 2);
    const c = holdStoredFile('/api/images/i1');
    await vi.advanceTimersByTimeAsync(RELEASE_AFTER_MS * 2);
    expect(await c.url).toBe('blob:1');
    expect(revoked).toEqual([]);
    c.release();
    await vi.advanceTimersByTimeAsync(RELEASE_AFTER_MS);
    expect(revoked).toEqual(['blob:1']);
    // Gone: a later view fetches it again.
    const d = holdStoredFile('/api/images/i1');
    expect(await d.url).toBe('blob:2');
    d.release();
  });
});
