//! The browser tests' binaries get a 4 MiB stack (WebAssembly's default is
//! 1 MiB). They mount the whole page in an unoptimised (debug) build, where
//! Leptos's nested views and the engine's futures take far more stack than
//! in the release build the page ships; at 1 MiB the page's layer table and
//! lessons tipped the first app test into a stack overflow, which in
//! WebAssembly silently overwrites the data below the stack ("memory access
//! out of bounds" elsewhere). Only these test binaries: the page's own
//! build is unchanged.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo:rustc-link-arg-tests=-zstack-size=4194304");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
