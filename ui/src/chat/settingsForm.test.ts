import { describe, expect, it } from 'vitest';
import { parseForm, toForm } from './settingsForm';

const settings = { system_prompt: 'Be brief.', temperature: 0.8, top_p: 0.95, max_tokens: null };

describe('settings form', () => {
  it('round-trips stored settings, empty max tokens meaning no limit', () => {
    expect(toForm(settings).max_tokens).toBe('');
    expect(parseForm(toForm(settings))).toEqual({ ok: true, settings });
    expect(parseForm({ ...toForm(settings), max_tokens: '512' })).toEqual({ ok: true, settings: { ...settings, max_tokens: 512 } });
  });

  it('refuses values the samplers do not accept', () => {
    const form = toForm(settings);
    for (const bad of [
      { ...form, temperature: '-0.1' },
      { ...form, temperature: '2.5' },
      { ...form, temperature: '' },
      { ...form, top_p: '0' },
      { ...form, top_p: '1.2' },
      { ...form, max_tokens: '0' },
      { ...form, max_tokens: '1.5' },
      { ...form, max_tokens: 'many' },
    ]) {
      expect(parseForm(bad).ok).toBe(false);
    }
  });
});
