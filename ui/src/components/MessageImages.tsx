/**
 * The pictures of a sent message, above its text: a message being sent shows the files from
 * this page; a stored one fetches each from the node once (with the API key).
 */
import type { MessageImage } from '../api/types';
import { storedImagePath } from '../chat/attachments';
import { formatBytes } from '../format';
import { useStoredFile } from '../hooks';
import './Images.css';

export function MessageImages({ images }: { images: MessageImage[] }) {
  if (images.length === 0) return null;
  return (
    <div className="msg-images">
      {images.map((image) => (
        <OneImage key={image.id} image={image} />
      ))}
    </div>
  );
}

function OneImage({ image }: { image: MessageImage }) {
  const { url, failed } = useStoredFile(image.local_url, storedImagePath(image.id));

  const dims = image.width > 0 ? `${image.width}×${image.height}, ` : '';
  const label = `Image, ${dims}${formatBytes(image.size)}`;
  if (failed) {
    return (
      <span className="msg-image missing" data-testid="message-image-missing" title={failed}>
        {label}: cannot be shown
      </span>
    );
  }
  return url ? (
    <img className="msg-image" data-testid="message-image" src={url} alt={label} title={label} />
  ) : (
    <span className="msg-image missing">{label}</span>
  );
}
