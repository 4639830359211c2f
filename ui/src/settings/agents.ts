/**
 * Pure helpers of Settings → Coding agents: the text shown for an agent (the key the page made
 * put where the node's text holds its placeholder) and the warning when the model's context is
 * smaller than the agent's own prompt.
 */
import type { AgentSettings, AgentsResponse } from '../api/types';

/** `text` with every `placeholder` replaced by `secret` (nothing to replace: as it is). */
export function fillKey(text: string, placeholder: string | null, secret: string | null): string {
  if (!placeholder || !secret) return text;
  return text.split(placeholder).join(secret);
}

/** The text to copy for `agent`: the node's, with the key made here filled in. */
export function agentText(data: AgentsResponse, agent: AgentSettings, secret: string | null): string {
  return fillKey(agent.text, data.key_placeholder, secret);
}

/** The sentence that warns of a model too small for `agent`'s own prompt, or null. */
export function tooSmallWarning(model: string, agent: AgentSettings): string | null {
  if (!agent.too_small || agent.model_context === null) return null;
  const n = (v: number) => v.toLocaleString('en-US');
  return (
    `${model} has ${n(agent.model_context)} tokens of context; ${agent.name}'s own prompt is about ` +
    `${n(agent.prompt_tokens)}: pick a model with a larger context.`
  );
}

/** The name of a key made for `agent` from this section, as the keys list will show it. */
export function agentKeyName(agent: AgentSettings): string {
  return `${agent.name} (coding agent)`;
}
