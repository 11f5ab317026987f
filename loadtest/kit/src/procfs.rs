//! Server-side measurements read from `/proc`: CPU time (`stat`) and resident memory (`status`).

use std::process::Command;
use std::sync::OnceLock;

/// Clock ticks per second (`getconf CLK_TCK`; 100 when it cannot be asked).
pub fn clock_ticks() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .filter(|t: &u64| *t > 0)
            .unwrap_or(100)
    })
}

/// utime + stime of process `pid` (all its threads), in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state(3) ... utime(14) stime(15) → indices 11 and 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Sum of [`cpu_ticks`] over `pids`, in milliseconds (`None` when any cannot be read).
pub fn cpu_ms(pids: &[u32]) -> Option<f64> {
    if pids.is_empty() {
        return None;
    }
    let mut ticks = 0;
    for p in pids {
        ticks += cpu_ticks(*p)?;
    }
    Some(ticks as f64 * 1000.0 / clock_ticks() as f64)
}

/// VmRSS of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Sum of [`rss_kib`] over `pids` (`None` when any cannot be read).
pub fn rss_total_kib(pids: &[u32]) -> Option<u64> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().map(|p| rss_kib(*p)).sum()
}

/// The pid of the process listening on TCP `port` (from `ss -ltnp`), if one can be seen.
pub fn pid_listening_on(port: u16) -> Option<u32> {
    let out = Command::new("ss")
        .args(["-ltnpH", &format!("sport = :{port}")])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let at = text.find("pid=")? + 4;
    let end = text[at..].find(|c: char| !c.is_ascii_digit())? + at;
    text[at..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_process() {
        let me = std::process::id();
        assert!(cpu_ticks(me).is_some());
        assert!(rss_kib(me).unwrap() > 0);
    }
}
