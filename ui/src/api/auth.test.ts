import { afterEach, describe, expect, it } from 'vitest';
import { authState, reportUnauthorized, resetAuth, subscribeAuth } from './auth';

describe('auth state', () => {
  afterEach(() => resetAuth());

  it('records a 401 once, tells listeners on change only, and resets on retry', () => {
    let calls = 0;
    const stop = subscribeAuth(() => calls++);
    const before = authState();
    expect(before).toEqual({ required: false, keyRefused: false });
    reportUnauthorized(false);
    expect(authState()).toEqual({ required: true, keyRefused: false });
    const same = authState();
    reportUnauthorized(false);
    expect(authState()).toBe(same);
    expect(calls).toBe(1);
    reportUnauthorized(true);
    expect(authState().keyRefused).toBe(true);
    resetAuth();
    expect(authState()).toEqual({ required: false, keyRefused: false });
    expect(calls).toBe(3);
    stop();
    reportUnauthorized(true);
    expect(calls).toBe(3);
  });
});
