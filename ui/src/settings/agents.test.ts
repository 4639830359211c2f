import { describe, expect, it } from 'vitest';
import type { AgentSettings, AgentsResponse } from '../api/types';
import { agentKeyName, agentText, fillKey, tooSmallWarning } from './agents';

const qwen = (over: Partial<AgentSettings> = {}): AgentSettings => ({
  id: 'qwen',
  name: 'Qwen Code',
  text: 'export OPENAI_BASE_URL=http://h:1/v1\nexport OPENAI_API_KEY=YOUR_HEARTH_KEY\n',
  prompt_tokens: 14300,
  model_context: 8192,
  too_small: true,
  ...over,
});

const response = (agent: AgentSettings, shared: boolean): AgentsResponse => ({
  url: 'http://h:1',
  model: 'SmolLM2',
  model_context: agent.model_context,
  shared,
  key_placeholder: shared ? 'YOUR_HEARTH_KEY' : null,
  agents: [agent],
});

describe('fillKey / agentText', () => {
  it('puts the key made here wherever the node put its placeholder', () => {
    expect(fillKey('a=K b=K', 'K', 'hearth_s')).toBe('a=hearth_s b=hearth_s');
    const a = qwen();
    const text = agentText(response(a, true), a, 'hearth_secret1');
    expect(text).toContain('OPENAI_API_KEY=hearth_secret1\n');
    expect(text).not.toContain('YOUR_HEARTH_KEY');
  });

  it('leaves the text as it is without a key or without a placeholder', () => {
    const a = qwen();
    expect(agentText(response(a, true), a, null)).toBe(a.text);
    // Not shared: the node's text holds no placeholder, and "hearth" elsewhere is never touched.
    const plain = qwen({ text: 'model_provider = "hearth"\nexport HEARTH_API_KEY=hearth\n' });
    expect(agentText(response(plain, false), plain, 'hearth_x')).toBe(plain.text);
  });
});

describe('tooSmallWarning', () => {
  it('names the model, its context, the agent and its prompt', () => {
    expect(tooSmallWarning('SmolLM2', qwen())).toBe(
      "SmolLM2 has 8,192 tokens of context; Qwen Code's own prompt is about 14,300: pick a model with a larger context.",
    );
  });

  it('says nothing when the context holds the prompt or is not known', () => {
    expect(tooSmallWarning('Gemma', qwen({ model_context: 32768, too_small: false }))).toBeNull();
    expect(tooSmallWarning('peer-model', qwen({ model_context: null, too_small: false }))).toBeNull();
  });
});

describe('agentKeyName', () => {
  it('is a valid key name naming the agent', () => {
    expect(agentKeyName(qwen())).toBe('Qwen Code (coding agent)');
  });
});
