/**
 * The application: the API key panel while the node refuses this browser (401), else the
 * shell: header, route -> page, and the long-lived state every page shares (the live node
 * state, the chat store, the conversation list). A retry from the key panel mounts a fresh
 * shell, so everything is fetched again with the new key.
 */
import { useCallback, useEffect, useMemo, useRef, useState } from 'react';
import { resetAuth } from './api/auth';
import { api } from './api/client';
import { setToken } from './api/token';
import type { Conversation } from './api/types';
import { ChatStore } from './chat/store';
import { AuthPanel } from './components/AuthPanel';
import { ChatView } from './components/ChatView';
import { Header } from './components/Header';
import { ModelsPage } from './components/ModelsPage';
import { SettingsPage } from './components/SettingsPage';
import { Sidebar } from './components/Sidebar';
import { ClusterPage } from './components/ClusterPage';
import { StatusPage } from './components/StatusPage';
import { navigate, useAuth, useConversationList, useLive, useRoute } from './hooks';
import { formatRoute, startRoute } from './route';

export function App() {
  const auth = useAuth();
  if (auth.required) {
    return (
      <AuthPanel
        keyRefused={auth.keyRefused}
        onRetry={(key) => {
          if (key) setToken(key);
          resetAuth();
        }}
      />
    );
  }
  return <Shell />;
}

function Shell() {
  const route = useRoute();
  const [live, dispatch] = useLive();
  const list = useConversationList();
  const refreshList = useRef(list.refresh);
  refreshList.current = list.refresh;
  const store = useMemo(() => new ChatStore({ onActivity: () => void refreshList.current() }), []);
  const [sidebarOpen, setSidebarOpen] = useState(true);
  const [lastConversationId, setLastConversationId] = useState<string | null>(null);

  // A new machine has no model yet: open on the Models page (once, at start).
  const startChecked = useRef(false);
  useEffect(() => {
    if (startChecked.current) return;
    startChecked.current = true;
    void api
      .status()
      .then((status) => {
        const next = startRoute(route, status.model.state);
        if (next) navigate(formatRoute(next));
      })
      .catch(() => undefined);
  }, [route]);

  const selectedId = route.page === 'chat' ? route.conversationId : null;
  useEffect(() => {
    if (selectedId) setLastConversationId(selectedId);
  }, [selectedId]);

  const create = useCallback(async (): Promise<Conversation> => {
    const conversation = await api.createConversation();
    store.adopt(conversation);
    navigate(formatRoute({ page: 'chat', conversationId: conversation.id }));
    void refreshList.current();
    return conversation;
  }, [store]);

  /** New chat, unless the one on screen is still empty: then it is reused. */
  const startNewChat = useCallback(() => {
    const current = store.view(selectedId);
    if (selectedId && current.loaded && !current.missing && !current.sending && current.messages.length === 0) {
      document.querySelector<HTMLTextAreaElement>('[data-testid="composer-input"]')?.focus();
      return;
    }
    void create().catch(() => undefined);
  }, [store, selectedId, create]);

  const rename = useCallback(
    async (id: string, title: string) => {
      try {
        store.setConversation(await api.updateConversation(id, { title }));
      } finally {
        void refreshList.current();
      }
    },
    [store],
  );

  const remove = useCallback(
    async (id: string) => {
      try {
        await api.deleteConversation(id);
        store.forget(id);
        if (selectedId === id) navigate(formatRoute({ page: 'chat', conversationId: null }));
        if (lastConversationId === id) setLastConversationId(null);
      } finally {
        void refreshList.current();
      }
    },
    [store, selectedId, lastConversationId],
  );

  return (
    <div className="app">
      <Header route={route} live={live} lastConversationId={lastConversationId} />
      <main className="app-main">
        {route.page === 'chat' && (
          <div className={`chat-layout${sidebarOpen ? '' : ' sidebar-hidden'}`}>
            <Sidebar
              conversations={list.items}
              loaded={list.loaded}
              error={list.error}
              selectedId={selectedId}
              query={list.query}
              onQuery={list.setQuery}
              onNew={startNewChat}
              onRename={rename}
              onDelete={remove}
            />
            <ChatView
              store={store}
              conversationId={selectedId}
              live={live}
              onCreate={create}
              onToggleSidebar={() => setSidebarOpen((o) => !o)}
            />
          </div>
        )}
        {route.page === 'models' && <ModelsPage live={live} dispatch={dispatch} />}
        {route.page === 'status' && <StatusPage live={live} />}
        {route.page === 'cluster' && <ClusterPage />}
        {route.page === 'settings' && <SettingsPage />}
      </main>
    </div>
  );
}
