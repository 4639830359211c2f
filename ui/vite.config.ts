// Build and unit-test configuration for Hearth's web UI.
//
// `base: './'` keeps every asset URL relative: the same `dist/` is served by the node at `/`
// and loaded by the Tauri window from `tauri://localhost`. JSX uses the automatic runtime
// through Vite's own transformer (Vite 8 replaced esbuild with Oxc; `oxc.jsx.runtime` is the
// equivalent of esbuild's `jsx: 'automatic'`), so no React plugin is needed.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  base: './',
  oxc: { jsx: { runtime: 'automatic' } },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    sourcemap: false,
    chunkSizeWarningLimit: 800,
  },
  test: {
    include: ['src/**/*.test.ts'],
    environment: 'node',
    // Stylesheets as their text, not empty: src/animations.test.ts reads them.
    css: true,
  },
});
