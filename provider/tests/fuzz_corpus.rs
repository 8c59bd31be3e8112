//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/*`), and the
//! generated seeds, through the same target bodies the cargo-fuzz targets
//! run, so every input that once crashed stays a regression test without
//! cargo-fuzz.

use std::path::PathBuf;

use uet::fuzzing;

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

#[test]
fn corpus_replays() {
    for target in fuzzing::TARGETS {
        let dir = corpus_dir(target);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{} is empty", dir.display());
        for f in &files {
            let data = std::fs::read(f).expect("corpus file");
            // A panic names the file through this message's context.
            eprintln!("replaying {}", f.display());
            assert!(fuzzing::run(target, &data));
        }
    }
}

#[test]
fn seeds_run() {
    for target in fuzzing::TARGETS {
        let seeds = fuzzing::seeds(target);
        assert!(!seeds.is_empty());
        for (_, data) in seeds {
            assert!(fuzzing::run(target, &data));
        }
    }
}

/// `cargo test -p uet --test fuzz_corpus -- --ignored` rewrites the seed
/// files (`seed-*`) of the committed corpus; other files are left alone.
#[test]
#[ignore]
fn write_seed_corpus() {
    for target in fuzzing::TARGETS {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).expect("corpus dir");
        for (name, data) in fuzzing::seeds(target) {
            std::fs::write(dir.join(format!("seed-{name}")), data).expect("write seed");
        }
    }
}
