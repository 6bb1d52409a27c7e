//! `luacheck` over every script, as the server runs it (its libraries joined before its
//! own file), in Redis's Lua: Lua 5.1 with the globals `redis`, `KEYS` and `ARGV` (and
//! the libraries Redis loads). A library's helpers that one script does not use are not
//! warnings; everything else luacheck finds is: globals, shadowing, unused variables and
//! arguments, unreachable code.

use std::process::Command;

use crate::scripts::FILES;

/// The globals of Redis's Lua besides Lua 5.1's standard library.
const REDIS_GLOBALS: [&str; 7] = ["redis", "KEYS", "ARGV", "cjson", "cmsgpack", "bit", "struct"];

#[test]
fn every_script_passes_luacheck() {
    let available = Command::new("luacheck").arg("--version").output().is_ok_and(|out| out.status.success());
    if !available {
        assert!(
            std::env::var("DISTLOCK_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "luacheck is missing (apt-get install lua-check); DISTLOCK_REQUIRE_SERVICES=1 makes that a failure"
        );
        eprintln!("skipped: luacheck is not installed (apt-get install lua-check)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("distlock-luacheck-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let mut paths = Vec::new();
    for (name, files, _) in FILES {
        let (script, libs) = files.split_last().expect("a script has a file");
        // The libraries' helpers are checked in the scripts that use them.
        let mut text = String::from("-- luacheck: push ignore 211\n");
        for (_, lib) in libs {
            text.push_str(lib);
        }
        text.push_str("-- luacheck: pop\n");
        text.push_str(script.1);
        let path = dir.join(format!("{name}.lua"));
        std::fs::write(&path, text).expect("write a script");
        paths.push(path);
    }
    // The check is live: a planted global is found.
    let planted = dir.join("planted.lua");
    std::fs::write(&planted, "found = redis.call('get', KEYS[1])\n").expect("write a script");
    let out = luacheck(std::slice::from_ref(&planted));
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stdout).contains("(W111)"), "{out:?}");

    let out = luacheck(&paths);
    std::fs::remove_dir_all(&dir).ok();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "luacheck found problems:\n{report}{}", String::from_utf8_lossy(&out.stderr));
}

fn luacheck(paths: &[std::path::PathBuf]) -> std::process::Output {
    Command::new("luacheck")
        .args(["--std", "lua51", "--no-max-line-length", "--codes", "--no-color", "--formatter", "plain"])
        .arg("--globals")
        .args(REDIS_GLOBALS)
        .arg("--")
        .args(paths)
        .output()
        .expect("run luacheck")
}
