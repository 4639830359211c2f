//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/*`, grown by `make fuzz`) through
//! the same functions the fuzz targets call, on stable Rust: an input that once crashed a
//! decoder stays a test once it is in the corpus.

use std::path::PathBuf;

use hearth_protocol::fuzzing;

#[test]
fn every_corpus_input_decodes_without_a_panic() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    for target in fuzzing::TARGETS {
        let dir = root.join(target);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("no corpus for {target} at {}: {e}", dir.display()));
        let mut inputs = 0;
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let outcome = std::panic::catch_unwind(|| fuzzing::run(target, &data));
            assert!(outcome.is_ok(), "{target} panicked on {}", path.display());
            inputs += 1;
        }
        assert!(inputs > 0, "the corpus of {target} is empty");
    }
}
