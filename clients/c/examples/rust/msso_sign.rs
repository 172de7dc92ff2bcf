//! Rust on libmsso, with nothing but the standard library: `extern "C"` declarations of the few
//! functions it uses and `#[repr(C)]` copies of their structs, as msso.h defines them. Signs one
//! request and prints the headers to add, one `Name: value` a line (Rust and Java (Panama, JNA)
//! and Node (koffi, ffi-napi) bind the same way).
//!
//!     rustc --edition 2021 -L clients/c/build -l msso msso_sign.rs
//!     msso_sign URL [GROUP] [METHOD]
//!
//! Exit status: msso's for the error (2 not logged in, 7 forbidden, …), 64 for bad arguments.
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::process::exit;

/// msso_error: the protocol's error name, the daemon's sentence, the msso command's exit status.
#[repr(C)]
struct MssoError {
    code: c_int,
    exit_status: c_int,
    name: [c_char; 32],
    message: [c_char; 1024],
}

#[repr(C)]
struct MssoHeader {
    name: *const c_char,
    value: *const c_char,
}

#[repr(C)]
struct MssoRequest {
    method: *const c_char,
    url: *const c_char,
    headers: *const MssoHeader,
    header_count: usize,
    body: *const c_void,
    body_length: usize,
    body_sha256: *const c_char,
    group: *const c_char,
    dpop_nonce: *const c_char,
}

#[repr(C)]
struct MssoHeaders {
    items: *mut MssoHeader,
    count: usize,
}

#[link(name = "msso")]
extern "C" {
    fn msso_connect(socket_path: *const c_char, err: *mut MssoError) -> *mut c_void;
    fn msso_sign(client: *mut c_void, request: *const MssoRequest, out: *mut MssoHeaders, err: *mut MssoError) -> c_int;
    fn msso_headers_free(headers: *mut MssoHeaders);
    fn msso_close(client: *mut c_void);
}

/// The broker's sentence and msso's exit status, as the msso command would end.
fn fail(err: &MssoError) -> ! {
    let message = unsafe { CStr::from_ptr(err.message.as_ptr()) }.to_string_lossy();
    let name = unsafe { CStr::from_ptr(err.name.as_ptr()) }.to_string_lossy();
    eprintln!("msso_sign: {message} ({name})");
    exit(err.exit_status)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 2 || args.len() > 4 {
        eprintln!("usage: msso_sign URL [GROUP] [METHOD]");
        exit(64);
    }
    let url = CString::new(args[1].as_str()).expect("a URL without NUL");
    let group = args.get(2).map(|g| CString::new(g.as_str()).expect("a group without NUL"));
    let method = CString::new(args.get(3).map_or("GET", |m| m.as_str())).expect("a method without NUL");
    let mut err = MssoError { code: 0, exit_status: 0, name: [0; 32], message: [0; 1024] };
    unsafe {
        let broker = msso_connect(std::ptr::null(), &mut err);
        if broker.is_null() {
            fail(&err);
        }
        let request = MssoRequest {
            method: method.as_ptr(),
            url: url.as_ptr(),
            headers: std::ptr::null(),
            header_count: 0,
            body: std::ptr::null(),
            body_length: 0,
            body_sha256: std::ptr::null(),
            group: group.as_ref().map_or(std::ptr::null(), |g| g.as_ptr()),
            dpop_nonce: std::ptr::null(),
        };
        let mut headers = MssoHeaders { items: std::ptr::null_mut(), count: 0 };
        if msso_sign(broker, &request, &mut headers, &mut err) != 0 {
            msso_close(broker);
            fail(&err);
        }
        for header in std::slice::from_raw_parts(headers.items, headers.count) {
            let name = CStr::from_ptr(header.name).to_string_lossy();
            let value = CStr::from_ptr(header.value).to_string_lossy();
            println!("{name}: {value}");
        }
        msso_headers_free(&mut headers); // wiped: they carry the token
        msso_close(broker);
    }
}
