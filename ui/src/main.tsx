/**
 * Entry point: takes a `?token=` API key out of the URL, decides where the API is (inside the
 * desktop app that means asking the shell, once), then mounts the app.
 */
import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { App } from './App';
import { initApiBase } from './api/base';
import { adoptTokenFromPage } from './api/token';
import './styles.css';

const root = document.getElementById('root');
if (!root) throw new Error('#root is missing from index.html');
adoptTokenFromPage(window);
void initApiBase().then(() =>
  createRoot(root).render(
    <StrictMode>
      <App />
    </StrictMode>,
  ),
);
