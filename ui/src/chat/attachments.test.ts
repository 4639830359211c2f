import { describe, expect, it } from 'vitest';
import { MAX_IMAGE_BYTES, MAX_IMAGES, MAX_MESSAGE_IMAGE_BYTES, screenFiles } from './attachments';

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
});
