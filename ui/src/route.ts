/**
 * The page and conversation shown, kept in the URL hash so a reload (or a link) returns to the
 * same place: `#/c/<id>` a conversation, `#/` the chat with none selected, `#/models`,
 * `#/status`, `#/cluster`, `#/settings`. The query string (`?api=`) is left alone.
 */

export type Route =
  | { page: 'chat'; conversationId: string | null }
  | { page: 'models' }
  | { page: 'status' }
  | { page: 'cluster' }
  | { page: 'settings' };

export function parseHash(hash: string): Route {
  const path = hash.replace(/^#/, '').replace(/^\/+/, '').replace(/\/+$/, '');
  const [head, ...rest] = path.split('/');
  if (head === 'models') return { page: 'models' };
  if (head === 'status') return { page: 'status' };
  if (head === 'cluster') return { page: 'cluster' };
  if (head === 'settings') return { page: 'settings' };
  if (head === 'c' && rest.length === 1 && rest[0]) {
    try {
      return { page: 'chat', conversationId: decodeURIComponent(rest[0]) };
    } catch {
      return { page: 'chat', conversationId: null };
    }
  }
  return { page: 'chat', conversationId: null };
}

export function formatRoute(route: Route): string {
  switch (route.page) {
    case 'models':
      return '#/models';
    case 'status':
      return '#/status';
    case 'cluster':
      return '#/cluster';
    case 'settings':
      return '#/settings';
    case 'chat':
      return route.conversationId ? `#/c/${encodeURIComponent(route.conversationId)}` : '#/';
  }
}

/**
 * Where the app should go when it first learns the model state: a node with no model yet
 * opens on the Models page, unless the user asked for a page or a conversation themselves.
 */
export function startRoute(route: Route, modelState: string): Route | null {
  const landing = route.page === 'chat' && route.conversationId === null;
  return landing && modelState === 'empty' ? { page: 'models' } : null;
}
