//! The WGSL kernels as the engine embeds them: each `shaders/*.wgsl` with
//! its comments and blank lines taken out (`OUT_DIR/<name>.wgsl`). The
//! comments are the kernels' documentation and stay in the source files;
//! in the page's WebAssembly they were about 15 KB of its gzipped size.

use std::path::Path;

fn main() {
    let shaders = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("../shaders");
    let out = std::env::var("OUT_DIR").expect("cargo sets it");
    println!("cargo:rerun-if-changed={}", shaders.display());
    for entry in std::fs::read_dir(&shaders).expect("shaders/ beside core/") {
        let path = entry.expect("a readable entry").path();
        if path.extension().is_none_or(|e| e != "wgsl") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a UTF-8 shader");
        // WGSL has no string literals, so `//` always starts a comment;
        // no kernel uses block comments (a test holds them out).
        let mut code = String::with_capacity(text.len());
        for line in text.lines() {
            let line = line.find("//").map_or(line, |i| &line[..i]).trim_end();
            if !line.is_empty() {
                code.push_str(line);
                code.push('\n');
            }
        }
        std::fs::write(Path::new(&out).join(path.file_name().expect("a file")), code).expect("OUT_DIR is writable");
    }
}
