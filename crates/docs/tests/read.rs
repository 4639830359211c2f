//! Documents made by real writers (reportlab, python-docx: `tests/fixtures/make_documents.py`),
//! read as a user attaches them: a 300-page manual page by page, a scan that says it is one, a
//! damaged PDF, a DOCX's headings, paragraphs and table, a zip bomb and XML nested without end
//! refused fast, and a file over the limit.

mod common;

use std::time::{Duration, Instant};

use common::file;
use hearth_docs::{read, Kind, Limits, ReadError};

#[test]
fn a_300_page_manual_reads_page_by_page() {
    let d = read("manual.pdf", &file("manual.pdf"), &Limits::default()).unwrap();
    assert_eq!(d.kind, Kind::Pdf);
    assert_eq!(d.pages.len(), 300);
    for n in [1usize, 40, 137, 300] {
        let page = &d.pages[n - 1];
        assert_eq!(page.number, Some(n as u32));
        assert!(
            page.text
                .contains(&format!("This is page {n} of the manual.")),
            "page {n}: {:?}",
            page.text
        );
        assert!(
            page.text
                .contains(&format!("The code word of page {n} is ")),
            "{:?}",
            page.text
        );
    }
    assert!(
        d.pages[40].text.starts_with("Chapter 5"),
        "{:?}",
        d.pages[40].text
    );
    let over = Limits {
        pages: 100,
        ..Limits::default()
    };
    assert_eq!(
        read("manual.pdf", &file("manual.pdf"), &over),
        Err(ReadError::TooManyPages {
            pages: 300,
            max: 100
        })
    );
}

#[test]
fn a_scan_says_it_has_no_text_and_a_damaged_pdf_says_it_is_damaged() {
    assert_eq!(
        read("scan.pdf", &file("scan.pdf"), &Limits::default()),
        Err(ReadError::NoTextLayer { pages: 3 })
    );
    let damaged = read("damaged.pdf", &file("damaged.pdf"), &Limits::default());
    assert!(matches!(damaged, Err(ReadError::Damaged(_))), "{damaged:?}");
}

#[test]
fn a_docx_reads_as_headings_paragraphs_and_rows() {
    let d = read("notes.docx", &file("notes.docx"), &Limits::default()).unwrap();
    assert_eq!(d.kind, Kind::Docx);
    assert_eq!(
        d.text(),
        "# Kitchen notes\n## Bread\nKnead the dough for ten minutes.\nLet it rise for an hour in a warm place.\n## Soup\nSimmer the leeks gently.\nsalt | a pinch\nwater | two litres"
    );
}

#[test]
fn a_zip_bomb_and_nesting_without_end_are_refused_fast() {
    let started = Instant::now();
    let bomb = read("bomb.docx", &file("bomb.docx"), &Limits::default());
    assert!(matches!(bomb, Err(ReadError::Bomb { .. })), "{bomb:?}");
    let deep = read("deep.docx", &file("deep.docx"), &Limits::default());
    assert_eq!(deep, Err(ReadError::TooDeep { max: 256 }));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_file_over_the_limit_and_a_zip_that_is_no_docx_are_refused() {
    let small = Limits {
        file_bytes: 1000,
        ..Limits::default()
    };
    assert_eq!(
        read("notes.docx", &file("notes.docx"), &small),
        Err(ReadError::TooLarge {
            bytes: file("notes.docx").len(),
            max: 1000
        })
    );
    assert!(matches!(
        read("notes.docx", b"not a zip", &Limits::default()),
        Err(ReadError::Damaged(_))
    ));
}
