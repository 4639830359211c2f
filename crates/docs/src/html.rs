//! An HTML page's text: its tags taken out, `script`, `style` and the head left out, block
//! elements apart by lines, `h1` to `h6` as Markdown headings (`# Title`), the common entities
//! and numeric references decoded. Written here rather than with an HTML parser crate
//! (`html5ever` and those on it) because only the words are wanted, and a browser-grade
//! parser would add a large build for them; text outside any tag is kept whatever the markup.

/// Elements whose end starts a new line.
const BLOCKS: &[&str] = &[
    "p",
    "div",
    "br",
    "li",
    "tr",
    "table",
    "section",
    "article",
    "header",
    "footer",
    "ul",
    "ol",
    "blockquote",
    "pre",
    "hr",
    "dt",
    "dd",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "title",
];
/// Elements whose content is not text.
const HIDDEN: &[&str] = &["script", "style", "template", "noscript", "svg", "head"];

/// The text of `html`, with Markdown headings.
pub(crate) fn text(html: &str) -> String {
    let mut out = String::with_capacity(html.len() / 2);
    let mut rest = html;
    let mut hidden: Option<String> = None;
    loop {
        // Inside a script or a style, nothing is a tag but its own end ('<' is code there).
        if let Some(name) = hidden.take() {
            let close = format!("</{name}");
            match find_ignoring_case(rest, &close) {
                Some(at) => {
                    let after = &rest[at..];
                    rest = after.find('>').map_or("", |end| &after[end + 1..]);
                    continue;
                }
                None => return tidy(&out),
            }
        }
        let Some(at) = rest.find('<') else { break };
        out.push_str(&decode(&rest[..at]));
        rest = &rest[at..];
        // A comment, or a tag up to its '>'; a '<' that opens neither is text.
        if let Some(after) = rest.strip_prefix("<!--") {
            rest = after.find("-->").map_or("", |end| &after[end + 3..]);
            continue;
        }
        // A '<' before neither a name, '/' nor '!' or '?' is text ("1 < 2").
        if !rest[1..].starts_with(|c: char| c.is_ascii_alphabetic() || matches!(c, '/' | '!' | '?'))
        {
            out.push('<');
            rest = &rest[1..];
            continue;
        }
        let Some(end) = rest.find('>') else {
            out.push_str(&decode(rest));
            rest = "";
            break;
        };
        let tag = &rest[1..end];
        rest = &rest[end + 1..];
        let closing = tag.starts_with('/');
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        if !closing && HIDDEN.contains(&name.as_str()) && !tag.ends_with('/') {
            hidden = Some(name);
            continue;
        }
        if let Some(level) = heading(&name) {
            if closing {
                out.push('\n');
            } else {
                out.push_str("\n\n");
                out.push_str(&"#".repeat(level));
                out.push(' ');
            }
        } else if BLOCKS.contains(&name.as_str()) {
            out.push('\n');
        } else if name == "td" || name == "th" {
            out.push_str(if closing { "" } else { " | " });
        }
    }
    out.push_str(&decode(rest));
    tidy(&out)
}

/// Where `needle` (ASCII) starts in `haystack`, whatever the case of either.
fn find_ignoring_case(haystack: &str, needle: &str) -> Option<usize> {
    let (h, n) = (haystack.as_bytes(), needle.as_bytes());
    (0..=h.len().checked_sub(n.len())?).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

fn heading(name: &str) -> Option<usize> {
    match name.as_bytes() {
        [b'h', d @ b'1'..=b'6'] => Some(usize::from(d - b'0')),
        _ => None,
    }
}

/// Entities and character references decoded; an unknown one is left as it is.
fn decode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let end = rest[1..].find(';').map(|e| e + 1).filter(|e| *e <= 10);
        let decoded = end.and_then(|end| entity(&rest[1..end]).map(|c| (c, end)));
        match decoded {
            Some((c, end)) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    // Whitespace in HTML is one space, whatever its kind or length.
    let mut spaced = String::with_capacity(out.len());
    let mut space = false;
    for c in out.chars() {
        if c.is_whitespace() {
            space = true;
        } else {
            if space {
                spaced.push(' ');
            }
            space = false;
            spaced.push(c);
        }
    }
    if space {
        spaced.push(' ');
    }
    spaced
}

fn entity(name: &str) -> Option<char> {
    let number = |digits: &str, radix| {
        u32::from_str_radix(digits, radix)
            .ok()
            .and_then(char::from_u32)
    };
    match name {
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        "nbsp" => Some(' '),
        "mdash" => Some('—'),
        "ndash" => Some('–'),
        "hellip" => Some('…'),
        "copy" => Some('©'),
        _ => match name.strip_prefix('#')? {
            hex if hex.starts_with(['x', 'X']) => number(&hex[1..], 16),
            dec => number(dec, 10),
        },
    }
}

/// Lines trimmed and their spaces single, runs of blank lines made one.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = false;
    for line in text.lines() {
        let line = line
            .split(' ')
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        let line = line.as_str();
        if line.is_empty() {
            blank = !out.is_empty();
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank { "\n\n" } else { "\n" });
        }
        out.push_str(line);
        blank = false;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_reads_as_its_words_with_headings_and_no_script() {
        let html = "<!doctype html><html><head><title>T</title><style>p{color:red}</style></head>\
            <body><h1>Kettle</h1><p>Fill it&nbsp;with <b>water</b> &amp; wait.</p>\
            <script>alert('<p>no</p>')</script><!-- hidden <p> -->\
            <h2 class=x>Lid</h2><table><tr><td>a</td><td>b</td></tr></table>\
            <p>5 &lt; 6 &#38; &#x41; &bogus; 1 < 2</p></body></html>";
        assert_eq!(
            text(html),
            "# Kettle\n\nFill it with water & wait.\n\n## Lid\n\n| a | b\n\n5 < 6 & A &bogus; 1 < 2"
        );
    }

    #[test]
    fn an_unclosed_tag_or_comment_ends_the_text_without_a_panic() {
        assert_eq!(text("words <b"), "words <b");
        assert_eq!(text("words <!-- never closed"), "words");
        assert_eq!(text("<script>never closed"), "");
    }

    #[test]
    fn a_script_full_of_angle_brackets_ends_at_its_own_end_tag() {
        let html = "<p>before</p><SCRIPT>for(i=0;i<n;i++){a='<b>'}</Script ><p>after</p>";
        assert_eq!(text(html), "before\n\nafter");
    }
}
