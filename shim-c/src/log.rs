//! Logging through libfabric's logger (`FI_LOG_LEVEL=info` shows it).

use std::ffi::CString;

use crate::bindings::*;

fn log(level: fi_log_level, subsys: fi_log_subsys, msg: &str) {
    let prov = crate::provider();
    if prov.is_null() {
        return;
    }
    // SAFETY: prov is the provider struct libfabric got from fi_prov_ini and
    // stays valid for the life of the library.
    if unsafe { fi_log_enabled(prov, level, subsys) } == 0 {
        return;
    }
    let Ok(text) = CString::new(msg.replace('\0', " ")) else {
        return;
    };
    // SAFETY: all strings are NUL-terminated and outlive the call; the format
    // "%s" consumes exactly the one vararg passed.
    unsafe {
        fi_log(
            prov,
            level,
            subsys,
            c"uet".as_ptr(),
            0,
            c"%s\n".as_ptr(),
            text.as_ptr(),
        );
    }
}

pub(crate) fn warn(subsys: fi_log_subsys, msg: &str) {
    log(FI_LOG_WARN, subsys, msg);
}

pub(crate) fn info(subsys: fi_log_subsys, msg: &str) {
    log(FI_LOG_INFO, subsys, msg);
}
