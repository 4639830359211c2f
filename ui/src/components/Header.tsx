/**
 * The app bar on every page: navigation, the model and its state ("Paused" while serving is
 * paused from the desktop app's tray), the live connection.
 */
import type { ModelState } from '../api/types';
import { percent } from '../format';
import { formatRoute, type Route } from '../route';
import type { LiveState } from '../status/live';

const STATE_LABEL: Record<ModelState, string> = {
  loading: 'Loading',
  ready: 'Ready',
  failed: 'Failed',
  stopped: 'Stopped',
  empty: 'No model',
};

export interface HeaderProps {
  route: Route;
  live: LiveState;
  /** The conversation the Chat tab returns to. */
  lastConversationId: string | null;
}

export function Header({ route, live, lastConversationId }: HeaderProps) {
  const { model, connection } = live;
  const paused = live.paused === true;
  const tab = (page: Route['page'], label: string, href: string) => (
    <a href={href} data-testid={`nav-${page}`} className="tab" aria-current={route.page === page ? 'page' : undefined}>
      {label}
    </a>
  );
  const stateLabel = model.state === 'loading' ? `Loading ${percent(model.progress)}%` : STATE_LABEL[model.state];
  return (
    <header className="app-header">
      <a className="brand" href={formatRoute({ page: 'chat', conversationId: lastConversationId })}>
        <span className="brand-mark" aria-hidden="true">
          ◆
        </span>
        <span className="brand-name">Hearth</span>
      </a>
      <nav className="tabs" aria-label="Pages">
        {tab('chat', 'Chat', formatRoute({ page: 'chat', conversationId: lastConversationId }))}
        {tab('models', 'Models', formatRoute({ page: 'models' }))}
        {tab('status', 'Status', formatRoute({ page: 'status' }))}
        {tab('cluster', 'Cluster', formatRoute({ page: 'cluster' }))}
        {tab('settings', 'Settings', formatRoute({ page: 'settings' }))}
      </nav>
      <div className="header-right">
        <a
          href={formatRoute({ page: 'models' })}
          className={`model-pill state-${model.state}${paused ? ' is-paused' : ''}`}
          data-testid="header-model"
          data-state={model.state}
          data-paused={paused ? 'true' : 'false'}
          title={
            (model.error ?? (model.id ? `${model.id}: ${STATE_LABEL[model.state]}` : 'No model loaded')) +
            (paused ? ' (serving paused from the desktop app)' : '')
          }
        >
          <span className="dot" aria-hidden="true" />
          <span className="model-name" data-testid="header-model-name">
            {model.id ?? 'No model'}
          </span>
          {model.id && (
            <span className="model-state" data-testid="header-model-state">
              {stateLabel}
            </span>
          )}
          {paused && (
            <span className="model-paused" data-testid="header-paused">
              Paused
            </span>
          )}
        </a>
        <span
          className={`conn conn-${connection}`}
          data-testid="connection-state"
          data-state={connection}
          title={connection === 'open' ? 'Live: connected to the node' : 'Reconnecting to the node…'}
          aria-label={connection === 'open' ? 'Connected' : 'Reconnecting'}
        />
      </div>
    </header>
  );
}
