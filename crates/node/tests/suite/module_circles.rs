//! No crate's top-level modules import each other in a circle (ARCHITECTURE.md, "Crates").
//! Read from the source: a top-level module is a file or folder under `src/` (the crate root
//! aside), and it imports another when its code names it through `crate::` (or `super::` from
//! a file directly under `src/`), directly or through an item the root re-exports from it.
//! Comments, string literals and `#[cfg(test)]` items are left out. No module names an item the
//! root defines itself either (a climb back to the root, which imports the module): a root is
//! a table of contents.

use crate::common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// `text` without comments and without the contents of string literals.
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
            }
            '"' => {
                out.push('"');
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
                out.push('"');
            }
            // A char literal ('"', '{'), not a lifetime ('a).
            '\'' => {
                let rest: String = chars.clone().take(3).collect();
                let literal = rest.starts_with('\\')
                    || rest.chars().nth(1) == Some('\'')
                    || rest.starts_with("\\u");
                if literal {
                    for c in chars.by_ref() {
                        if c == '\'' {
                            break;
                        }
                    }
                    out.push_str("' '");
                } else {
                    out.push('\'');
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// `code` without its `#[cfg(test)]` items (the attribute, any attributes after it, and the
/// item to its `;` or its closing brace).
fn without_tests(code: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let item = &rest[at + MARK.len()..];
        let end = match (item.find(';'), item.find('{')) {
            (Some(semi), Some(open)) if semi < open => semi + 1,
            (Some(semi), None) => semi + 1,
            (_, Some(open)) => {
                let mut depth = 0usize;
                let mut close = item.len();
                for (i, c) in item[open..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                close = open + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                close
            }
            (None, None) => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// Each path a `crate::` or `use` group names, as its first identifier and the name it brings
/// in: `a::X` gives (`a`, `X`); `{a::{X}, b::Y as Z}` gives (`a`, ``) for the inner group and
/// (`b`, `Z`).
fn heads(rest: &str) -> Vec<(String, String)> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let Some(group) = rest.strip_prefix('{') else {
        let path: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':' || *c == ' ')
            .collect();
        let leaf = match path.split_once(" as ") {
            Some((_, alias)) => ident(alias),
            None => ident(path.trim_end().rsplit("::").next().unwrap_or_default()),
        };
        return vec![(ident(&path), leaf)];
    };
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                out.extend(heads(group[start..i].trim()));
                return out;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.extend(heads(group[start..i].trim()));
                start = i + 1;
            }
            _ => {}
        }
    }
    out
}

/// Every `.rs` file under `src`.
fn sources(src: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source folder").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

const ROOTS: [&str; 2] = ["lib", "main"];

/// Each top-level module of the crate in `src` and the top-level modules it imports.
fn module_edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = sources(src);
    let top_of = |path: &Path| -> (String, bool) {
        let rel = path.strip_prefix(src).expect("under src");
        let parts = rel.components().count();
        let first = rel.components().next().expect("a component");
        let name = first.as_os_str().to_string_lossy();
        let direct = parts == 1 || (parts == 2 && rel.ends_with("mod.rs"));
        (name.trim_end_matches(".rs").to_owned(), direct)
    };
    let code = |path: &Path| without_tests(&code_of(&std::fs::read_to_string(path).unwrap()));
    let modules: BTreeSet<String> = files
        .iter()
        .map(|f| top_of(f).0)
        .filter(|m| !ROOTS.contains(&m.as_str()))
        .collect();
    // What the roots bring in from their modules (`pub use m::{X, Y as Z}`): X and Z are m's.
    let mut reexported: BTreeMap<String, String> = BTreeMap::new();
    for file in files
        .iter()
        .filter(|f| ROOTS.contains(&top_of(f).0.as_str()))
    {
        let text = code(file);
        for (at, _) in text.match_indices("use ") {
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let path = text[at + 4..].trim_start();
            let path = path
                .strip_prefix("crate::")
                .or_else(|| path.strip_prefix("self::"))
                .unwrap_or(path);
            let Some(head) = heads(path).first().map(|(h, _)| h.clone()) else {
                continue;
            };
            if !modules.contains(&head) {
                continue;
            }
            let inner = path
                .strip_prefix(head.as_str())
                .and_then(|p| p.strip_prefix("::"));
            for (_, leaf) in heads(inner.unwrap_or_default()) {
                reexported.insert(leaf, head.clone());
            }
        }
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let (top, direct) = top_of(file);
        if ROOTS.contains(&top.as_str()) {
            continue;
        }
        for head in named(&code(file), direct) {
            let target = if modules.contains(&head) {
                Some(head)
            } else {
                reexported.get(&head).cloned()
            };
            if let Some(t) = target.filter(|t| *t != top) {
                edges.entry(top.clone()).or_default().insert(t);
            }
        }
    }
    edges
}

/// The first name of every `crate::` path in a module file's code, and of every `super::` path
/// in a file directly under `src/` (whose `super` is the crate root).
fn named(text: &str, direct: bool) -> Vec<String> {
    let mut prefixes = vec!["crate::"];
    if direct {
        prefixes.push("super::");
    }
    let mut out = Vec::new();
    for prefix in prefixes {
        for (at, _) in text.match_indices(prefix) {
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            out.extend(
                heads(&text[at + prefix.len()..])
                    .into_iter()
                    .map(|(h, _)| h),
            );
        }
    }
    out
}

/// The items a crate root (`lib.rs`, `main.rs`) defines itself, not those it re-exports:
/// read from the lines that open at the left margin (the code is rustfmt's).
fn root_items(src: &Path) -> BTreeSet<String> {
    const KINDS: [&str; 9] = [
        "struct",
        "enum",
        "fn",
        "const",
        "static",
        "type",
        "trait",
        "union",
        "macro_rules!",
    ];
    let mut items = BTreeSet::new();
    for root in ROOTS {
        let Ok(text) = std::fs::read_to_string(src.join(format!("{root}.rs"))) else {
            continue;
        };
        for line in without_tests(&code_of(&text)).lines() {
            let words: Vec<&str> = line
                .split(|c: char| c.is_whitespace() || c == '(' || c == '<' || c == ':' || c == '{')
                .filter(|w| !w.is_empty())
                .collect();
            let mut at = 0;
            while words.get(at).is_some_and(|w| {
                ["pub", "crate)", "super)", "async", "unsafe", "extern"].contains(w)
                    || (*w == "const" && words.get(at + 1) == Some(&"fn"))
            }) {
                at += 1;
            }
            if line.starts_with(char::is_whitespace)
                || !words.get(at).is_some_and(|w| KINDS.contains(w))
            {
                continue;
            }
            if let Some(name) = words.get(at + 1) {
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    items.insert(name);
                }
            }
        }
    }
    items
}

/// Each use of an item the crate root defines by a module (a climb back to the root, which
/// imports the module): `module -> Item`.
fn climbs(src: &Path) -> Vec<String> {
    let items = root_items(src);
    let mut found = BTreeSet::new();
    for file in sources(src) {
        let rel = file.strip_prefix(src).expect("under src");
        let top = rel.components().next().expect("a component");
        let top = top.as_os_str().to_string_lossy();
        let top = top.trim_end_matches(".rs");
        if ROOTS.contains(&top) {
            continue;
        }
        let direct = rel.components().count() == 1
            || (rel.components().count() == 2 && rel.ends_with("mod.rs"));
        let text = without_tests(&code_of(&std::fs::read_to_string(&file).unwrap()));
        for head in named(&text, direct) {
            if items.contains(&head) {
                found.insert(format!("{top} -> {head}"));
            }
        }
    }
    found.into_iter().collect()
}

/// Each circle among `edges`, as `a -> b -> ... -> a`: the shortest through each module that
/// is the smallest name of one.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut found = Vec::new();
    for start in edges.keys() {
        let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue: VecDeque<&str> = VecDeque::from([start.as_str()]);
        let mut closed = None;
        'search: while let Some(at) = queue.pop_front() {
            for next in edges.get(at).into_iter().flatten() {
                if next == start {
                    closed = Some(at);
                    break 'search;
                }
                if next.as_str() > start.as_str() && !came_from.contains_key(next.as_str()) {
                    came_from.insert(next, at);
                    queue.push_back(next);
                }
            }
        }
        if let Some(mut at) = closed {
            let mut back = Vec::new();
            while at != start {
                back.push(at);
                at = came_from[at];
            }
            let mut path = vec![start.as_str()];
            path.extend(back.into_iter().rev());
            path.push(start);
            found.push(path.join(" -> "));
        }
    }
    found
}

#[test]
fn no_crate_has_modules_that_import_each_other_in_a_circle() {
    let mut wrong = Vec::new();
    let mut read = 0;
    for (name, dir) in common::workspace::crates() {
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        read += 1;
        for circle in circles(&module_edges(&src)) {
            wrong.push(format!("{name}: {circle}"));
        }
    }
    assert!(read >= 14, "read {read} crates");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn no_module_climbs_back_to_an_item_its_crate_root_defines() {
    let mut wrong = Vec::new();
    for (name, dir) in common::workspace::crates() {
        let src = dir.join("src");
        if src.is_dir() {
            wrong.extend(climbs(&src).into_iter().map(|c| format!("{name}: {c}")));
        }
    }
    assert!(
        wrong.is_empty(),
        "a crate root is a table of contents: move these into modules\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_check_sees_climbs_to_what_the_root_defines() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |name: &str, text: &str| std::fs::write(src.join(name), text).unwrap();
    std::fs::create_dir(src.join("c")).unwrap();
    write(
        "lib.rs",
        "mod a; mod b; mod c;\npub use a::Aye;\npub struct Root;\npub(crate) const fn made() -> u8 { 1 }\nfn helper() {}\n#[cfg(test)]\nfn only_tests() {}",
    );
    write(
        "a.rs",
        "pub struct Aye;\nuse super::{helper, b::Y};\nfn f() { crate::Aye; }",
    );
    write(
        "b.rs",
        "use crate::Root;\n// crate::made in a comment\nfn g() { crate::only_tests() }",
    );
    write("c/inner.rs", "fn h() { super::helper(); crate::made(); }");
    assert_eq!(
        climbs(src),
        ["a -> helper", "b -> Root", "c -> made"],
        "not a re-export, a comment, a test item or a nested super::"
    );
}

#[test]
fn the_check_sees_circles_through_files_folders_groups_and_reexports() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |name: &str, text: &str| std::fs::write(src.join(name), text).unwrap();
    std::fs::create_dir(src.join("c")).unwrap();
    std::fs::create_dir(src.join("e")).unwrap();
    write(
        "lib.rs",
        "mod a; mod b; mod c; mod d; mod e;\npub use d::{Dee, inner::Deep as Renamed};",
    );
    write(
        "a.rs",
        "use super::b::Y;\n// crate::c in a comment\nconst S: &str = \"crate::c\";",
    );
    write("b.rs", "use crate::{e::{X, W}, c::Z};");
    write(
        "c/mod.rs",
        "#[cfg(test)]\nfn helper() { crate::b::f() }\npub fn z() { crate::Renamed::new() }",
    );
    write("d.rs", "pub struct Dee; fn f() { let _ = crate::a::A; }");
    write(
        "e/inner.rs",
        "fn g() { super::super::c::z() }\n#[cfg(test)]\nmod t { use crate::b; }",
    );
    let edges = module_edges(src);
    let names = |m: &str| -> Vec<&str> {
        edges
            .get(m)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect()
    };
    assert_eq!(
        names("a"),
        ["b"],
        "super:: from a file under src/; no comment or string"
    );
    assert_eq!(names("b"), ["c", "e"], "a group, and a group inside it");
    assert_eq!(
        names("c"),
        ["d"],
        "an item the root re-exports; not a test helper"
    );
    assert_eq!(names("d"), ["a"]);
    assert!(
        names("e").is_empty(),
        "super:: in a nested file; no test module"
    );
    assert_eq!(circles(&edges), ["a -> b -> c -> d -> a"]);
    let mut cut = edges.clone();
    cut.get_mut("c").unwrap().clear();
    assert!(circles(&cut).is_empty());
}

/// The server's doors: each translates one protocol (or the UI's API) and takes what it shares
/// with the others from the toolkit (`door`, `stream`, `error`, `ws`, ...), never from another
/// door.
const DOORS: &[&str] = &[
    "openai",
    "ollama",
    "anthropic",
    "responses",
    "generate",
    "batch",
    "chat",
    "auth",
];

/// Each import of a door by another door, as `from -> to`.
fn door_crossings(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    DOORS
        .iter()
        .flat_map(|from| {
            edges
                .get(*from)
                .into_iter()
                .flatten()
                .filter(|to| to.as_str() != *from && DOORS.contains(&to.as_str()))
                .map(move |to| format!("{from} -> {to}"))
        })
        .collect()
}

#[test]
fn no_door_imports_another_door() {
    let (_, server) = common::workspace::crates()
        .into_iter()
        .find(|(name, _)| name == "hearth-server")
        .expect("the server crate");
    let edges = module_edges(&server.join("src"));
    for door in DOORS {
        assert!(
            edges.contains_key(*door),
            "no door module {door}: {edges:?}"
        );
    }
    let crossings = door_crossings(&edges);
    assert!(crossings.is_empty(), "{}", crossings.join("\n"));
    // The check sees one.
    let mut crossed = edges.clone();
    crossed
        .get_mut("anthropic")
        .unwrap()
        .insert("openai".to_owned());
    assert_eq!(door_crossings(&crossed), ["anthropic -> openai"]);
}
