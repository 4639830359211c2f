//! Chat templates: the GGUF's own Jinja template (`tokenizer.chat_template`) rendered with
//! minijinja the way llama-server `--jinja` and Hugging Face render it (trim_blocks,
//! lstrip_blocks, Python string methods, `raise_exception`, `strftime_now`). When a template
//! cannot be rendered here the engine falls back to llama.cpp's built-in templates (model.rs).

use std::time::{SystemTime, UNIX_EPOCH};

use hearth_protocol::{ChatMessage, Tool};
use minijinja::{context, Environment, Error, ErrorKind};

/// Why a template could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("chat template does not compile: {0}")]
    Compile(String),
    #[error("chat template failed to render: {0}")]
    Render(String),
}

/// A compiled chat template plus the special-token strings templates refer to.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

const NAME: &str = "chat";

/// What a template may be told beside the messages.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extras<'a> {
    pub tools: Option<&'a [Tool]>,
    pub think: Option<bool>,
}

impl ChatTemplate {
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(NAME, source.to_owned())
            .map_err(|e| TemplateError::Compile(describe(&e)))?;
        Ok(Self {
            env,
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
        })
    }

    /// Render a conversation, ending with the assistant's opening when `add_generation_prompt`.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        self.render_with(messages, Extras::default(), add_generation_prompt)
    }

    /// [`Self::render`] with the variables Hugging Face passes beside the messages: `tools`,
    /// and `enable_thinking` (Qwen 3's switch), each only when set.
    pub fn render_with(
        &self,
        messages: &[ChatMessage],
        extras: Extras<'_>,
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        let tmpl = self
            .env
            .get_template(NAME)
            .map_err(|e| TemplateError::Compile(describe(&e)))?;
        let base = context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
        };
        // Absent, not `none`: templates test `tools is defined` and `enable_thinking is defined`.
        let mut extra = std::collections::BTreeMap::new();
        if let Some(t) = extras.tools {
            extra.insert("tools", minijinja::Value::from_serialize(t));
        }
        if let Some(on) = extras.think {
            extra.insert("enable_thinking", minijinja::Value::from(on));
        }
        tmpl.render(context! { ..minijinja::Value::from(extra), ..base })
            .map_err(|e| TemplateError::Render(describe(&e)))
    }
}

fn describe(e: &Error) -> String {
    match e.detail() {
        Some(d) => format!("{}: {d}", e.kind()),
        None => e.to_string(),
    }
}

fn raise_exception(message: String) -> Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now(fmt)` as llama-server provides it (Llama 3 templates put today's date in the
/// system prompt). Supports the directives chat templates use: %d %m %Y %y %b %B %H %M %S %%.
fn strftime_now(format: String) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    strftime_at(&format, secs)
}

fn strftime_at(format: &str, unix_secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let days = (unix_secs / 86_400) as i64;
    let rem = unix_secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    let mut out = String::with_capacity(format.len() + 8);
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&format!("{:02}", year % 100)),
            Some('b') => out.push_str(&MONTHS[(month - 1) as usize][..3]),
            Some('B') => out.push_str(MONTHS[(month - 1) as usize]),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Days since 1970-01-01 to (year, month 1..=12, day 1..=31), Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The template inside SmolLM2-135M-Instruct's GGUF.
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn smollm2_adds_its_default_system_prompt_like_llama_server() {
        let t = ChatTemplate::new(SMOLLM2, "<|im_start|>", "<|im_end|>").unwrap();
        let out = t
            .render(&[ChatMessage::new("user", "Hello")], true)
            .unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn smollm2_keeps_a_given_system_prompt() {
        let t = ChatTemplate::new(SMOLLM2, "", "").unwrap();
        let out = t
            .render(
                &[
                    ChatMessage::new("system", "Be terse."),
                    ChatMessage::new("user", "Hi"),
                ],
                false,
            )
            .unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        );
    }

    #[test]
    fn python_methods_raise_exception_and_block_trimming() {
        let src = "{% for m in messages %}\n  {% if m.role not in ['user','assistant'] %}{{ raise_exception('bad role ' + m.role) }}{% endif %}\n[{{ m.content.strip() | upper }}]{% endfor %}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        assert_eq!(
            t.render(&[ChatMessage::new("user", "  hi  ")], true)
                .unwrap(),
            "[HI]"
        );
        let err = t
            .render(&[ChatMessage::new("tool", "x")], true)
            .unwrap_err();
        assert!(err.to_string().contains("bad role tool"), "{err}");
    }

    #[test]
    fn broken_templates_are_errors_not_panics() {
        assert!(matches!(
            ChatTemplate::new("{% for %}", "", ""),
            Err(TemplateError::Compile(_))
        ));
    }

    #[test]
    fn strftime_formats_known_dates() {
        // 2024-02-29 13:05:09 UTC
        assert_eq!(
            strftime_at("%d %b %Y %H:%M:%S %%", 1_709_211_909),
            "29 Feb 2024 13:05:09 %"
        );
        assert_eq!(strftime_at("%B %d, %y", 0), "January 01, 70");
        assert!(!strftime_now("%Y".into()).is_empty());
    }
}
