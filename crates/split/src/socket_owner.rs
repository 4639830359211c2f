//! Which process holds a loopback TCP connection: a split model's tunnel takes its local end's
//! connection only from the worker process it started, since the tunnel reaches a peer's RPC
//! server, which trusts whatever arrives. Linux reads `/proc` (the kernel's socket table, and
//! the worker's descriptors); where that cannot be read, only the worker's own start order
//! protects the port (it connects before anything else knows the port).

use std::net::SocketAddr;

/// Whether process `pid` holds the socket connected from `from` to `to` (as `to`'s listener
/// saw it).
#[cfg(target_os = "linux")]
pub(crate) fn connected_from(pid: u32, from: SocketAddr, to: SocketAddr) -> bool {
    let Some(inode) = socket_inode(from, to) else {
        return false;
    };
    let wanted = format!("socket:[{inode}]");
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == wanted))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn connected_from(_pid: u32, _from: SocketAddr, _to: SocketAddr) -> bool {
    true
}

/// The inode of the socket whose local address is `local` and peer `peer`, from the kernel's
/// table (`/proc/net/tcp`, or `tcp6` for IPv6).
#[cfg(target_os = "linux")]
fn socket_inode(local: SocketAddr, peer: SocketAddr) -> Option<u64> {
    let table = if local.is_ipv4() { "tcp" } else { "tcp6" };
    let text = std::fs::read_to_string(format!("/proc/net/{table}")).ok()?;
    find_inode(&text, local.port(), peer.port())
}

/// In a `/proc/net/tcp` table, the inode of the socket with local port `local` and remote port
/// `remote` (ports in hex after the address's colon; the inode is the tenth column).
fn find_inode(table: &str, local: u16, remote: u16) -> Option<u64> {
    let port = |field: &str| {
        field
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
    };
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        (cols.len() > 9 && port(cols[1])? == local && port(cols[2])? == remote)
            .then(|| cols[9].parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_is_found_by_its_two_ports() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
             0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0\n\
             1: 0100007F:C350 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1\n";
        assert_eq!(find_inode(table, 0xC350, 0x1F90), Some(222));
        assert_eq!(find_inode(table, 0x1F90, 0), Some(111));
        assert_eq!(find_inode(table, 0x1F90, 0xC350), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_holds_its_own_connection_and_not_another_programs() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = listener.local_addr().unwrap();
        let _ours = std::net::TcpStream::connect(at).unwrap();
        let (_, from) = listener.accept().unwrap();
        assert!(connected_from(std::process::id(), from, at));
        // Another program's connection: a child process's.
        let mut child = std::process::Command::new("python3")
            .args(["-c", &format!("import socket,sys,time\ns=socket.create_connection(('127.0.0.1',{}))\nsys.stdout.write('up\\n');sys.stdout.flush();time.sleep(30)", at.port())])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let (_, theirs) = listener.accept().unwrap();
        assert!(!connected_from(std::process::id(), theirs, at));
        assert!(connected_from(child.id(), theirs, at));
        let _ = child.kill();
        let _ = child.wait();
    }
}
