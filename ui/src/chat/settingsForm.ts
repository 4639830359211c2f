/**
 * The conversation settings form: what the inputs show for stored settings, and the checked
 * settings a filled-in form stands for (the ranges llama.cpp's samplers accept, and the tool
 * loop's step limit the node accepts).
 */
import type { ConversationSettings, ToolChoice } from '../api/types';

export interface SettingsForm {
  system_prompt: string;
  temperature: string;
  top_p: string;
  /** Empty means no limit. */
  max_tokens: string;
  /** Offer the MCP servers' tools to the model. */
  tools: boolean;
  /** The most answers with tool calls one turn may chain. */
  tool_steps: string;
  /** Whether the model must call a tool: never, in a turn's first answer, or in every one. */
  tool_choice: ToolChoice;
}

export const TEMPERATURE_MAX = 2;
export const TOOL_STEPS_MIN = 1;
export const TOOL_STEPS_MAX = 50;
/** What the node uses for a conversation that never set them (docs/API.md). */
export const DEFAULT_TOOLS = true;
export const DEFAULT_TOOL_STEPS = 10;

export function toForm(s: ConversationSettings): SettingsForm {
  return {
    system_prompt: s.system_prompt,
    temperature: String(s.temperature),
    top_p: String(s.top_p),
    max_tokens: s.max_tokens === null ? '' : String(s.max_tokens),
    tools: s.tools ?? DEFAULT_TOOLS,
    tool_steps: String(s.tool_steps ?? DEFAULT_TOOL_STEPS),
    tool_choice: s.tool_choice ?? 'auto',
  };
}

export type ParsedSettings = { ok: true; settings: ConversationSettings } | { ok: false; error: string };

export function parseForm(form: SettingsForm): ParsedSettings {
  const temperature = Number(form.temperature);
  if (form.temperature.trim() === '' || !Number.isFinite(temperature) || temperature < 0 || temperature > TEMPERATURE_MAX) {
    return { ok: false, error: `Temperature must be between 0 and ${TEMPERATURE_MAX}.` };
  }
  const topP = Number(form.top_p);
  if (form.top_p.trim() === '' || !Number.isFinite(topP) || topP <= 0 || topP > 1) {
    return { ok: false, error: 'Top P must be greater than 0 and at most 1.' };
  }
  let maxTokens: number | null = null;
  if (form.max_tokens.trim() !== '') {
    maxTokens = Number(form.max_tokens);
    if (!Number.isInteger(maxTokens) || maxTokens < 1) {
      return { ok: false, error: 'Max tokens must be a whole number of at least 1, or empty for no limit.' };
    }
  }
  const toolSteps = Number(form.tool_steps);
  if (form.tool_steps.trim() === '' || !Number.isInteger(toolSteps) || toolSteps < TOOL_STEPS_MIN || toolSteps > TOOL_STEPS_MAX) {
    return { ok: false, error: `Tool steps must be a whole number from ${TOOL_STEPS_MIN} to ${TOOL_STEPS_MAX}.` };
  }
  return {
    ok: true,
    settings: {
      system_prompt: form.system_prompt,
      temperature,
      top_p: topP,
      max_tokens: maxTokens,
      tools: form.tools,
      tool_steps: toolSteps,
      tool_choice: form.tool_choice,
    },
  };
}
