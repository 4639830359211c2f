import { describe, expect, it } from 'vitest';
import { nextDot } from './TypingDots';

describe('typing dots', () => {
  it('light each of the three in turn, then the first again', () => {
    expect([0, 1, 2].map(nextDot)).toEqual([1, 2, 0]);
  });
});
