import { describe, expect, it } from 'vitest';
import { MAX_IMAGE_BYTES, MAX_IMAGES, screenFiles } from './attachments';

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
      0,
    );
    expect(taken.map((f) => f.name)).toEqual(['a.png', 'b.jpg', 'c.webp', 'd.gif']);
    expect(refused).toEqual([
      'report.pdf is not an image the node reads (PNG, JPEG, GIF or WebP).',
      'photo.heic is not an image the node reads (PNG, JPEG, GIF or WebP).',
      'huge.png is 8.0 MB; an image may have at most 8.0 MB.',
      'the pasted image is not an image the node reads (PNG, JPEG, GIF or WebP).',
    ]);
  });

  it('keeps a message within the node\'s count of images', () => {
    const files = [file('1.png', 'image/png'), file('2.png', 'image/png'), file('3.png', 'image/png')];
    const { taken, refused } = screenFiles(files, MAX_IMAGES - 2);
    expect(taken.map((f) => f.name)).toEqual(['1.png', '2.png']);
    expect(refused).toEqual([`A message carries at most ${MAX_IMAGES} images.`]);
    expect(screenFiles(files, 0).taken).toHaveLength(3);
  });
});
