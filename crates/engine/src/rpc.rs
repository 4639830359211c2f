//! llama.cpp's RPC backend (`ggml-rpc`, built with `GGML_RPC=ON`), which `llama-cpp-2` does not
//! wrap: running its server over this machine's CPU, and adding a remote server's devices so a
//! model can place layers on them. Every `unsafe` block of the split model lives here.
//!
//! Both calls are process-wide: a server never returns, and a lost server aborts the process
//! that uses its devices (GGML_ABORT), so the node runs each in a process of its own.
//!
//! ggml's server has no authentication and accepts whoever connects, so [`serve_one`] serves a
//! single connection, this process's own, and then shuts ggml's listening socket: the port
//! refuses every other connection, from this machine too.
#![allow(unsafe_code)]

use std::ffi::{c_char, CString};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use llama_cpp_sys_2::{ggml_backend_dev_t, ggml_backend_reg_t, ggml_backend_t};

// ggml/include/ggml-rpc.h. The RPC backend is a library loaded at run time (ggml's
// GGML_BACKEND_DL), so its functions are looked up, not linked: the two it exports through its
// registry, and `ggml_backend_rpc_init` from the library itself.
type StartServer = unsafe extern "C" fn(
    endpoint: *const c_char,
    cache_dir: *const c_char,
    n_threads: usize,
    n_devices: usize,
    devices: *mut ggml_backend_dev_t,
);
type AddServer = unsafe extern "C" fn(endpoint: *const c_char) -> ggml_backend_reg_t;
type Init = unsafe extern "C" fn(endpoint: *const c_char, device: u32) -> ggml_backend_t;

/// The RPC backend's functions.
struct Rpc {
    start_server: StartServer,
    add_server: AddServer,
    init: Init,
}

/// The RPC backend's functions, found once.
fn rpc() -> Result<&'static Rpc, RpcError> {
    static RPC: OnceLock<Result<Rpc, String>> = OnceLock::new();
    RPC.get_or_init(find)
        .as_ref()
        .map_err(|e| RpcError::Backend(e.clone()))
}

fn find() -> Result<Rpc, String> {
    crate::backend::backend()?;
    // SAFETY: lookups in ggml's registry, initialised by the backend held above; the names are
    // NUL-terminated literals. Each address found is the function of that name, whose
    // signature ggml-rpc.h gives (the types above).
    unsafe {
        let reg = llama_cpp_sys_2::ggml_backend_reg_by_name(c"RPC".as_ptr());
        if reg.is_null() {
            return Err("this build of llama.cpp has no RPC backend".into());
        }
        let address = |name: &std::ffi::CStr| {
            let a = llama_cpp_sys_2::ggml_backend_reg_get_proc_address(reg, name.as_ptr());
            (!a.is_null()).then_some(a)
        };
        let start = address(c"ggml_backend_rpc_start_server")
            .ok_or("the RPC backend has no ggml_backend_rpc_start_server")?;
        let add = address(c"ggml_backend_rpc_add_server")
            .ok_or("the RPC backend has no ggml_backend_rpc_add_server")?;
        let init = symbol_beside(add, c"ggml_backend_rpc_init")
            .ok_or("the RPC backend's library has no ggml_backend_rpc_init")?;
        Ok(Rpc {
            start_server: std::mem::transmute::<*mut std::ffi::c_void, StartServer>(start),
            add_server: std::mem::transmute::<*mut std::ffi::c_void, AddServer>(add),
            init: std::mem::transmute::<*mut std::ffi::c_void, Init>(init),
        })
    }
}

/// The address of `name` in the library that holds `known` (or anywhere in the process).
///
/// # Safety
/// `known` must be an address inside a loaded library.
#[cfg(unix)]
unsafe fn symbol_beside(
    known: *mut std::ffi::c_void,
    name: &std::ffi::CStr,
) -> Option<*mut std::ffi::c_void> {
    // SAFETY: `Dl_info` is plain data, valid all zeros; dladdr fills it for an address of a
    // loaded library. dlopen with RTLD_NOLOAD only finds that library (never loads one), and
    // the handle stays valid as the library is never unloaded.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(known.cast_const(), &raw mut info) != 0 && !info.dli_fname.is_null() {
            let lib = libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD);
            if !lib.is_null() {
                let s = libc::dlsym(lib, name.as_ptr());
                if !s.is_null() {
                    return Some(s);
                }
            }
        }
        let s = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
        (!s.is_null()).then_some(s)
    }
}

#[cfg(not(unix))]
unsafe fn symbol_beside(
    _known: *mut std::ffi::c_void,
    _name: &std::ffi::CStr,
) -> Option<*mut std::ffi::c_void> {
    None
}

/// What can go wrong before the RPC backend runs.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("an endpoint is HOST:PORT without NUL bytes, not {0:?}")]
    Endpoint(String),
    #[error("this build of llama.cpp has no CPU device to serve")]
    NoCpu,
    #[error("the RPC server at {0} offers no device")]
    NoDevices(String),
    #[error("the RPC server stopped: {0}")]
    Stopped(String),
    #[error("llama.cpp backend: {0}")]
    Backend(String),
    #[error("the RPC server did not take this process's connection: {0}")]
    NotOurs(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// An endpoint ggml can both serve and reach: an IPv4 address and a port (its parser splits at
/// the first `:`, and its server takes only an address).
fn endpoint(at: &str) -> Result<CString, RpcError> {
    match at.split_once(':') {
        Some((host, port))
            if host.parse::<std::net::Ipv4Addr>().is_ok() && port.parse::<u16>().is_ok() =>
        {
            CString::new(at).map_err(|_| RpcError::Endpoint(at.to_owned()))
        }
        _ => Err(RpcError::Endpoint(at.to_owned())),
    }
}

/// Serve this machine's CPU to RPC clients at `at` (HOST:PORT) with `threads` threads, one
/// client at a time, until the listening socket fails. Blocks the calling thread; returns only
/// with why it stopped.
pub fn serve(at: &str, threads: usize) -> RpcError {
    let at_c = match endpoint(at) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let rpc = match rpc() {
        Ok(r) => r,
        Err(e) => return e,
    };
    // SAFETY: a plain lookup in ggml's device registry, initialised by the backend we hold.
    let cpu = unsafe {
        llama_cpp_sys_2::ggml_backend_dev_by_type(llama_cpp_sys_2::GGML_BACKEND_DEVICE_TYPE_CPU)
    };
    if cpu.is_null() {
        return RpcError::NoCpu;
    }
    let mut devices = [cpu];
    // SAFETY: the endpoint is a NUL-terminated string alive for the whole call; the cache
    // directory may be null (no cache); `devices` holds one valid device for the call's length.
    unsafe {
        (rpc.start_server)(
            at_c.as_ptr(),
            std::ptr::null(),
            threads.max(1),
            devices.len(),
            devices.as_mut_ptr(),
        );
    }
    RpcError::Stopped(format!(
        "ggml's RPC server at {at} returned (see its output)"
    ))
}

/// Register the RPC server at `at` and give the indices, in ggml's device list, of the devices
/// it offers (what `LlamaModelParams::with_devices` takes). Connects to the server to count
/// them, and a server that does not answer aborts the process (ggml's own behaviour); the same
/// endpoint registered twice gives the same devices.
///
/// ggml connects anew whenever nothing holds its connection to a server (after counting the
/// devices, say), and a tunnel carries one connection: a backend on the server's first device
/// is made and kept for the life of the process, which holds that one connection open.
pub(crate) fn add_server(at: &str) -> Result<Vec<usize>, RpcError> {
    // Held for the whole registration: ggml's registry is not synchronised.
    static HELD: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let rpc = rpc()?;
    let at_c = endpoint(at)?;
    let mut held = HELD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !held.iter().any(|h| h == at) {
        // SAFETY: a NUL-terminated endpoint alive for the call (a server that does not answer
        // aborts the process). The backend is never freed: it keeps ggml's connection.
        let _backend: ggml_backend_t = unsafe { (rpc.init)(at_c.as_ptr(), 0) };
        held.push(at.to_owned());
    }
    // SAFETY: a NUL-terminated endpoint alive for the call; ggml copies it. Null means the
    // server has no device.
    let reg = unsafe { (rpc.add_server)(at_c.as_ptr()) };
    if reg.is_null() {
        return Err(RpcError::NoDevices(at.to_owned()));
    }
    // SAFETY: `reg` is the valid registry ggml just gave; its devices live as long as the
    // process. Registering one twice would list its devices twice, so only a new one is added;
    // `HELD` keeps other threads of this process out of ggml's registry meanwhile.
    let devices: Vec<ggml_backend_dev_t> = unsafe {
        let count = llama_cpp_sys_2::ggml_backend_reg_dev_count(reg);
        let devices: Vec<_> = (0..count)
            .map(|i| llama_cpp_sys_2::ggml_backend_reg_dev_get(reg, i))
            .collect();
        let known = (0..llama_cpp_sys_2::ggml_backend_dev_count())
            .any(|i| Some(&llama_cpp_sys_2::ggml_backend_dev_get(i)) == devices.first());
        if !known {
            llama_cpp_sys_2::ggml_backend_register(reg);
        }
        devices
    };
    // SAFETY: reading ggml's device list, which only grows (under `HELD`).
    let all: Vec<ggml_backend_dev_t> = unsafe {
        (0..llama_cpp_sys_2::ggml_backend_dev_count())
            .map(|i| llama_cpp_sys_2::ggml_backend_dev_get(i))
            .collect()
    };
    drop(held);
    Ok(devices
        .iter()
        .filter_map(|d| all.iter().position(|a| a == d))
        .collect())
}

/// ggml's RPC server on a free loopback port, serving only the connection this returns: the
/// server's own thread runs until that connection closes, then stops (its listening socket is
/// shut, so it accepts nothing more). `threads` compute threads.
///
/// Another program that connects first makes this fail (ggml serves one client at a time, in
/// order), and one that connects later is refused.
#[cfg(unix)]
pub fn serve_one(
    threads: usize,
    wait: Duration,
) -> Result<(TcpStream, std::thread::JoinHandle<RpcError>), RpcError> {
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port();
    let at = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    let server = std::thread::Builder::new()
        .name("rpc-server".into())
        .spawn(move || serve(&at.to_string(), threads))?;
    let deadline = Instant::now() + wait;
    let ours = loop {
        if server.is_finished() {
            return Err(server
                .join()
                .unwrap_or_else(|_| RpcError::Stopped("the server thread panicked".into())));
        }
        match TcpStream::connect(at) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(e.into()),
        }
    };
    ours.set_nodelay(true)?;
    let listener = listening_fd(port)
        .ok_or_else(|| RpcError::NotOurs(format!("no socket of this process listens on {at}")))?;
    // Wait for ggml to take our connection from the accept queue: a queue that stays full
    // means it serves a connection made before ours.
    while accept_queue(listener) != Some(0) {
        if Instant::now() >= deadline {
            return Err(RpcError::NotOurs(format!(
                "another connection to {at} came first"
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: `listener` is an open socket of this process (found just above); shutting it
    // makes the kernel refuse new connections and reset any queued since the check.
    if unsafe { libc::shutdown(listener, libc::SHUT_RDWR) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    if TcpStream::connect_timeout(&at.into(), Duration::from_secs(1)).is_ok() {
        return Err(RpcError::NotOurs(format!("{at} still accepts connections")));
    }
    Ok((ours, server))
}

/// The descriptor of this process's socket listening on loopback port `port`.
#[cfg(unix)]
fn listening_fd(port: u16) -> Option<libc::c_int> {
    let fds = std::fs::read_dir("/dev/fd").ok()?;
    fds.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::c_int>().ok())
        .find(|&fd| {
            // SAFETY: `sockaddr_in` is plain data, valid all zeros.
            let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            let mut listening: libc::c_int = 0;
            let mut opt_len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: both calls only write into the buffers given, whose lengths they are
            // told; a descriptor that is not a socket makes them fail, and is passed over.
            let named = unsafe {
                libc::getsockname(fd, (&raw mut addr).cast(), &raw mut len) == 0
                    && libc::getsockopt(
                        fd,
                        libc::SOL_SOCKET,
                        libc::SO_ACCEPTCONN,
                        (&raw mut listening).cast(),
                        &raw mut opt_len,
                    ) == 0
            };
            named
                && i32::from(addr.sin_family) == libc::AF_INET
                && u16::from_be(addr.sin_port) == port
                && listening != 0
        })
}

/// Connections waiting in a listening socket's accept queue (Linux reports it in `TCP_INFO`).
#[cfg(target_os = "linux")]
fn accept_queue(fd: libc::c_int) -> Option<u32> {
    // SAFETY: `tcp_info` is plain data, valid all zeros.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`; a bad descriptor fails.
    let ok = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &raw mut len,
        )
    } == 0;
    ok.then_some(info.tcpi_unacked)
}

/// Elsewhere the queue cannot be read: a moment for ggml to accept.
#[cfg(all(unix, not(target_os = "linux")))]
fn accept_queue(_fd: libc::c_int) -> Option<u32> {
    std::thread::sleep(Duration::from_millis(200));
    Some(0)
}

/// This process's standard output for raw bytes, with file descriptor 1 pointed at standard
/// error from now on: ggml's server prints its banner with `printf`, which must not mix into
/// the bytes.
#[cfg(unix)]
pub fn take_stdout() -> std::io::Result<std::fs::File> {
    use std::os::fd::FromRawFd as _;
    // SAFETY: dup and dup2 on the standard descriptors, checked; the duplicate is a fresh
    // descriptor that only the returned File owns.
    unsafe {
        let copy = libc::dup(1);
        if copy < 0 || libc::dup2(2, 1) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(std::fs::File::from_raw_fd(copy))
    }
}

/// No more malloc arenas for the process (glibc reserves 64 MiB of address space for each
/// new thread's arena otherwise, which a limit on the address space would count). Call
/// before the RPC server's threads start; arenas made before stay, and are counted.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn one_malloc_arena() {
    // SAFETY: mallopt sets a tunable of glibc's allocator under the allocator's own lock;
    // glibc allows it while other threads allocate.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_host_and_port() {
        assert!(endpoint("127.0.0.1:50052").is_ok());
        for bad in [
            "127.0.0.1",
            ":50052",
            "[::1]:50052",
            "localhost:50052",
            "127.0.0.1:70000",
            "127.0.0.1:1\0",
        ] {
            assert!(endpoint(bad).is_err(), "{bad}");
        }
    }
}
