//! `FI_UET_*` parameters: defined at load time so `fi_info -e` lists them,
//! read back through `fi_param_get` whenever a domain builds its [`Config`].

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};
use std::ptr;

use uet::config::{Config, ParamKind, ParamValue, PARAMS};

use crate::bindings::*;
use crate::log;

fn kind_of(kind: ParamKind) -> fi_param_type {
    match kind {
        ParamKind::Int => FI_PARAM_INT,
        ParamKind::Bool => FI_PARAM_BOOL,
        ParamKind::Str => FI_PARAM_STRING,
    }
}

fn define_one(prov: *mut fi_provider, name: &str, kind: fi_param_type, help: &str) {
    let (Ok(name), Ok(help)) = (CString::new(name), CString::new(help)) else {
        return;
    };
    // SAFETY: prov is our leaked provider struct; name/help are NUL-terminated
    // and "%s" consumes exactly the one vararg. libfabric copies the strings.
    unsafe {
        fi_param_define(prov, name.as_ptr(), kind, c"%s".as_ptr(), help.as_ptr());
    }
}

/// Define every parameter (called once from `fi_prov_ini`).
pub(crate) fn define(prov: *mut fi_provider) {
    for p in PARAMS {
        define_one(prov, p.name, kind_of(p.kind), p.help);
    }
}

/// False, with a warning, when the parameter's variable holds something
/// libfabric would misread: it takes integers with `strtol`, which stops at
/// the first character it cannot use, so "abc" would quietly become 0 and
/// "2k" 2.
fn integer_or_unset(name: &str) -> bool {
    let var = format!("FI_UET_{}", name.to_ascii_uppercase());
    let Some(text) = std::env::var_os(&var) else {
        return true;
    };
    let text = text.to_string_lossy();
    if whole_int(&text) {
        return true;
    }
    log::warn(
        FI_LOG_CORE,
        &format!("{var}: {text:?} is not an integer that fits an int; keeping the default"),
    );
    false
}

/// Whether `strtol(text, NULL, 0)` reads all of `text` (but surrounding
/// blanks), in decimal, hex (`0x`) or octal (leading `0`) as it does, into
/// a value that fits an int.
fn whole_int(text: &str) -> bool {
    // strtol skips the C locale's blanks only: a no-break space copied
    // from a web page stops it at once.
    let t = text.trim_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, unsigned) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (radix, digits) = if let Some(hex) = unsigned
        .strip_prefix("0x")
        .or_else(|| unsigned.strip_prefix("0X"))
    {
        (16, hex)
    } else if unsigned.len() > 1 && unsigned.starts_with('0') {
        (8, &unsigned[1..])
    } else {
        (10, unsigned)
    };
    // from_str_radix would take a second sign.
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return false;
    }
    i64::from_str_radix(digits, radix)
        .ok()
        .map(|v| if negative { -v } else { v })
        .is_some_and(|v| c_int::try_from(v).is_ok())
}

/// Read one parameter; `None` when unset (or on any failure).
fn get(name: &str, kind: ParamKind) -> Option<ParamValue> {
    let prov = crate::provider();
    if prov.is_null() {
        return None;
    }
    let cname = CString::new(name).ok()?;
    if kind == ParamKind::Int && !integer_or_unset(name) {
        return None;
    }
    match kind {
        ParamKind::Int | ParamKind::Bool => {
            let mut v: c_int = 0;
            // SAFETY: INT and BOOL parameters are written as an int.
            let rc = unsafe { fi_param_get(prov, cname.as_ptr(), (&mut v as *mut c_int).cast()) };
            (rc == 0).then(|| match kind {
                ParamKind::Bool => ParamValue::Bool(v != 0),
                _ => ParamValue::Int(i64::from(v)),
            })
        }
        ParamKind::Str => {
            let mut s: *mut c_char = ptr::null_mut();
            // SAFETY: STRING parameters are written as a char pointer into the
            // environment, which we copy and do not free.
            let rc =
                unsafe { fi_param_get(prov, cname.as_ptr(), (&mut s as *mut *mut c_char).cast()) };
            if rc != 0 || s.is_null() {
                return None;
            }
            // SAFETY: s is a NUL-terminated string from getenv.
            let text = unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
            Some(ParamValue::Str(text))
        }
    }
}

/// The engine configuration: defaults overridden by every `FI_UET_*` set.
pub(crate) fn config() -> Config {
    let mut config = Config::default();
    for p in PARAMS {
        if let Some(v) = get(p.name, p.kind) {
            if let Err(e) = config.set(p.name, v) {
                log::warn(FI_LOG_CORE, &format!("{e}; keeping the default"));
            }
        }
    }
    config
}

/// `FI_UET_SRC_ADDR`, if set.
pub(crate) fn src_addr() -> Option<String> {
    Some(config().src_addr).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::whole_int;

    #[test]
    fn integers_are_what_strtol_reads_whole() {
        for ok in [
            "50",
            " 50 ",
            "+7",
            "-5",
            "0",
            "0x10",
            "0X1f",
            "010",
            "2147483647",
        ] {
            assert!(whole_int(ok), "{ok:?}");
        }
        for bad in [
            "\u{a0}5",
            "0x-5",
            "",
            " ",
            "abc",
            "2k",
            "50us",
            "1.5",
            "0x",
            "+-5",
            "--5",
            "09",
            "2147483648",
            "1e3",
        ] {
            assert!(!whole_int(bad), "{bad:?}");
        }
    }
}
