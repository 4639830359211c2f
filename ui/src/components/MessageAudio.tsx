/**
 * The audio clips of a sent message, above its text, each a player: a message being sent plays
 * the file from this page; a stored one fetches it from the node once (with the API key).
 */
import type { MessageAudio as Clip } from '../api/types';
import { storedAudioPath } from '../chat/attachments';
import { formatBytes } from '../format';
import { useStoredFile } from '../hooks';
import './Images.css';

export function MessageAudio({ clips }: { clips: Clip[] }) {
  if (clips.length === 0) return null;
  return (
    <div className="msg-audio">
      {clips.map((clip) => (
        <OneClip key={clip.id} clip={clip} />
      ))}
    </div>
  );
}

function OneClip({ clip }: { clip: Clip }) {
  const { url, failed } = useStoredFile(clip.local_url, storedAudioPath(clip.id));

  const label = `Audio, ${clip.format.toUpperCase()}, ${formatBytes(clip.size)}`;
  if (failed) {
    return (
      <span className="msg-clip missing" data-testid="message-audio-missing" title={failed}>
        {label}: cannot be played
      </span>
    );
  }
  return url ? (
    <audio className="msg-clip" data-testid="message-audio" src={url} controls preload="metadata" aria-label={label} title={label} />
  ) : (
    <span className="msg-clip missing">{label}</span>
  );
}
