import { describe, expect, it } from 'vitest';
import { parseForm, toForm } from './settingsForm';

const settings = { system_prompt: 'Be brief.', temperature: 0.8, top_p: 0.95, max_tokens: null, tools: true, tool_steps: 10, tool_choice: 'auto' as const };

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
      { ...form, tool_steps: '0' },
      { ...form, tool_steps: '51' },
      { ...form, tool_steps: '2.5' },
      { ...form, tool_steps: '' },
      { ...form, tool_steps: 'ten' },
    ]) {
      expect(parseForm(bad).ok).toBe(false);
    }
  });

  it('takes the tool switch and steps, 1 to 50, and says what is wrong', () => {
    const form = toForm(settings);
    expect(parseForm({ ...form, tools: false, tool_steps: '1' })).toEqual({ ok: true, settings: { ...settings, tools: false, tool_steps: 1 } });
    expect(parseForm({ ...form, tool_steps: ' 50 ' })).toEqual({ ok: true, settings: { ...settings, tool_steps: 50 } });
    expect(parseForm({ ...form, tool_steps: '51' })).toEqual({ ok: false, error: 'Tool steps must be a whole number from 1 to 50.' });
    expect(parseForm({ ...form, tool_choice: 'first' })).toEqual({ ok: true, settings: { ...settings, tool_choice: 'first' } });
    expect(toForm({ ...settings, tool_choice: 'required' }).tool_choice).toBe('required');
  });

  it('shows the defaults for a conversation stored before tools (on, 10 steps)', () => {
    const old = { system_prompt: '', temperature: 0.8, top_p: 0.95, max_tokens: null };
    const form = toForm(old);
    expect([form.tools, form.tool_steps]).toEqual([true, '10']);
    expect(parseForm(form)).toEqual({ ok: true, settings: { ...old, tools: true, tool_steps: 10, tool_choice: 'auto' } });
  });
});
