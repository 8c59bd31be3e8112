//! Generates Rust declarations for the installed libfabric headers and links
//! against libfabric (for fi_dupinfo, fi_freeinfo, fi_param_*, fi_log*,
//! fi_version).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=../include/rdma/fi_ext_uet.h");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-lib=fabric");

    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_type("fi_.*|fid.*|FI_.*")
        .allowlist_function(
            "fi_dupinfo|fi_freeinfo|fi_param_define|fi_param_get|fi_log|fi_log_enabled|fi_strerror|fi_version",
        )
        .allowlist_var("FI_.*")
        // Static inline wrappers are not exported by libfabric; we never call them.
        .generate_inline_functions(false)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(false)
        .generate()
        .unwrap_or_else(|e| panic!("bindgen over the libfabric headers failed: {e}"));

    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("bindings.rs");
    bindings
        .write_to_file(&out)
        .unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}
