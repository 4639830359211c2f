/**
 * A tool call's result in the chat. A result is data from another program: text parts are
 * React text (never HTML, never Markdown), images only as data URLs of an image type, links
 * only to http(s) with their name as plain text; anything else is shown as words.
 */
import type { ToolContent, ToolOutcome } from '../api/mcpTypes';
import { imageSrc, linkHref } from '../chat/toolView';
import { formatBytes } from '../format';

export function ToolOutcomeView({ outcome }: { outcome: ToolOutcome }) {
  return (
    <div
      className={`tool-outcome${outcome.is_error ? ' is-error' : ''}`}
      data-testid="tool-outcome"
      data-is-error={outcome.is_error ? 'true' : 'false'}
    >
      {outcome.is_error && (
        <p className="tool-outcome-flag" data-testid="tool-outcome-error">
          The tool says it failed:
        </p>
      )}
      {outcome.parts.map((part, i) => (
        <ToolPart key={i} part={part} />
      ))}
      {outcome.parts.length === 0 && <p className="muted tool-note">The tool gave back nothing.</p>}
      {outcome.cut_bytes > 0 && (
        <p className="tool-note" data-testid="tool-outcome-cut">
          {formatBytes(outcome.cut_bytes)} of this result were left out (a result may be at most 1 MB); the model was
          told.
        </p>
      )}
    </div>
  );
}

function ToolPart({ part }: { part: ToolContent }) {
  switch (part.type) {
    case 'text':
      return (
        <pre className="tool-text" data-testid="tool-part-text">
          {String(part.text ?? '')}
        </pre>
      );
    case 'image': {
      const src = imageSrc(part.mime_type, part.data);
      return src ? (
        <img className="tool-image" data-testid="tool-part-image" src={src} alt="An image the tool gave back" />
      ) : (
        <p className="muted tool-note">An image the page cannot show (type {String(part.mime_type)}).</p>
      );
    }
    case 'link': {
      const href = linkHref(part.uri);
      const label = String(part.name || part.uri || '');
      return (
        <p className="tool-link" data-testid="tool-part-link">
          {href ? (
            <a href={href} target="_blank" rel="noopener noreferrer">
              {label}
            </a>
          ) : (
            <span>{label}</span>
          )}
          {label !== part.uri && <code className="tool-uri">{String(part.uri ?? '')}</code>}
        </p>
      );
    }
    default:
      return <p className="muted tool-note">A part of a kind this page does not show.</p>;
  }
}
