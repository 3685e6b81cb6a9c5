//! The components as detached processes: started with their logs, checked, stopped by PID, and
//! the lock that keeps two runs off one host.

use std::fs;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use super::*;

pub(super) fn spawn_detached(name: &str, exe: &Path, args: &[String], logs: &Path) -> anyhow::Result<ProcessRecord> {
    use std::os::unix::process::CommandExt as _;
    if !exe.is_file() {
        bail!("{name}: executable {} does not exist", exe.display());
    }
    let log_path = logs.join(format!("{name}.log"));
    let log = fs::OpenOptions::new().create(true).append(true).open(&log_path)?;
    writeln!(&log, "---- {} starting: {} {}", name, exe.display(), args.join(" "))?;
    let child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: an interrupted `make` must not take the cluster down with it.
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {name} ({})", exe.display()))?;
    let exe_name = exe.file_name().and_then(|s| s.to_str()).unwrap_or(name).to_string();
    Ok(ProcessRecord { name: name.to_string(), pid: child.id() as i32, exe_name, exe: exe.to_path_buf(), args: args.to_vec() })
}

pub(super) fn process_alive(rec: &ProcessRecord) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{}/stat", rec.pid)) else { return false };
    // Field 3 (after the parenthesised command) is the state; Z and X are dead.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
    if matches!(state, Some("Z") | Some("X")) {
        return false;
    }
    let cmdline = fs::read(format!("/proc/{}/cmdline", rec.pid)).unwrap_or_default();
    let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    Path::new(std::str::from_utf8(argv0).unwrap_or_default()).file_name().and_then(|s| s.to_str()) == Some(rec.exe_name.as_str())
}

pub(super) fn stop_process(rec: &ProcessRecord) {
    signal_until_gone(rec);
    collect(rec.pid);
}

pub(super) fn signal_until_gone(rec: &ProcessRecord) {
    if !process_alive(rec) {
        return;
    }
    unsafe { libc::kill(rec.pid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        reap(rec.pid);
        if !process_alive(rec) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    unsafe { libc::kill(rec.pid, libc::SIGKILL) };
    for _ in 0..100 {
        reap(rec.pid);
        if !process_alive(rec) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Collects the exit status when the process is our own child (tests call `up` in-process);
/// whether there is nothing left to collect (collected now, or not our child).
pub(super) fn reap(pid: i32) -> bool {
    let mut status = 0;
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) != 0 }
}

/// Waits up to 2 s for a child that no longer counts as alive to be collected: a process reads
/// as gone while it is still exiting (a Go binary's main thread is a zombie before its other
/// threads end), and a child nobody collects stays a zombie until this process exits (a soak's
/// kube-apiserver restarts left one each).
pub(super) fn collect(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !reap(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// An exclusive `flock` on a file, so concurrent `up`/`down` calls on one directory serialise.
pub struct FileLock(fs::File);

impl FileLock {
    pub(super) fn acquire(path: &Path) -> anyhow::Result<Self> {
        use std::os::fd::AsRawFd as _;
        let f = fs::OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            bail!("cannot lock {}: {}", path.display(), std::io::Error::last_os_error());
        }
        Ok(Self(f))
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd as _;
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(pid: i32) -> Option<String> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).map(str::to_string)
    }

    /// A child that has already exited when it is stopped (as a process that is still exiting
    /// reads) is collected, not left a zombie until the tests end.
    #[test]
    // Collecting the child is what `stop_process` is tested for.
    #[allow(clippy::zombie_processes)]
    fn stopping_an_exited_child_leaves_no_zombie() {
        let child = Command::new("true").spawn().expect("true runs");
        let pid = child.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(10);
        while state(pid).as_deref() != Some("Z") {
            assert!(Instant::now() < deadline, "pid {pid} did not exit: {:?}", state(pid));
            std::thread::sleep(Duration::from_millis(10));
        }
        let rec = ProcessRecord { name: "true".into(), pid, exe_name: "true".into(), exe: PathBuf::from("true"), args: Vec::new() };
        stop_process(&rec);
        assert_eq!(state(pid), None, "pid {pid} is left behind");
    }
}
