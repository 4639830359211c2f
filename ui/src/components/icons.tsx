/** Small inline SVG icons (stroke follows `currentColor`), so nothing is fetched. */
import type { ReactElement } from 'react';

function icon(path: ReactElement, size = 16) {
  return (
    <svg
      width={size}
      height={size}
      viewBox="0 0 24 24"
      fill="none"
      stroke="currentColor"
      strokeWidth={2}
      strokeLinecap="round"
      strokeLinejoin="round"
      aria-hidden="true"
      focusable="false"
    >
      {path}
    </svg>
  );
}

export const PlusIcon = () => icon(<path d="M12 5v14M5 12h14" />);
export const PencilIcon = () => icon(<path d="M12 20h9M16.5 3.5a2.1 2.1 0 0 1 3 3L7 19l-4 1 1-4z" />);
export const TrashIcon = () =>
  icon(<path d="M3 6h18M8 6V4h8v2M19 6l-1 14H6L5 6M10 11v6M14 11v6" />);
export const SendIcon = () => icon(<path d="M22 2 11 13M22 2l-7 20-4-9-9-4z" />);
export const StopIcon = () => icon(<rect x="6" y="6" width="12" height="12" rx="2" fill="currentColor" />);
export const RefreshIcon = () => icon(<path d="M21 12a9 9 0 1 1-3-6.7L21 8M21 3v5h-5" />);
export const CopyIcon = () =>
  icon(
    <>
      <rect x="9" y="9" width="12" height="12" rx="2" />
      <path d="M5 15H4a1 1 0 0 1-1-1V4a1 1 0 0 1 1-1h10a1 1 0 0 1 1 1v1" />
    </>,
  );
export const SlidersIcon = () =>
  icon(<path d="M4 21v-7M4 10V3M12 21v-9M12 8V3M20 21v-5M20 12V3M1 14h6M9 8h6M17 16h6" />);
export const ImageIcon = () =>
  icon(
    <>
      <rect x="3" y="3" width="18" height="18" rx="2" />
      <circle cx="9" cy="9" r="2" />
      <path d="m21 15-5-5L5 21" />
    </>,
  );
export const CloseIcon = () => icon(<path d="M18 6 6 18M6 6l12 12" />);
export const MenuIcon = () => icon(<path d="M3 6h18M3 12h18M3 18h18" />);
export const SearchIcon = () =>
  icon(
    <>
      <circle cx="11" cy="11" r="7" />
      <path d="m21 21-4.3-4.3" />
    </>,
  );
