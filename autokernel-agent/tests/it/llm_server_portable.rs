//! The llama.cpp build behind the round-trip tests is portable: no AVX-512 or AMX
//! instruction in its libraries. A build for the build machine's own CPU dies with
//! "Illegal instruction" on a machine whose CPU advertises those features but whose VM does
//! not enable them (seen on 2026-12-01; the Makefile builds for AVX2 at most).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The project's venv interpreter, as `llm_server` finds it.
fn python() -> PathBuf {
    std::env::var_os("AUTOKERNEL_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python"))
}

/// Whether one line of `objdump -d` output is an AVX-512 or AMX instruction: a 512-bit
/// register (`%zmm`), an opmask register (`%k0`–`%k7`, AVX-512 only), one of the upper 16
/// vector registers (`%xmm16`–`%ymm31`, reachable only through EVEX, i.e. AVX-512VL), or an
/// AMX tile instruction (Intel SDM vol. 2, "Intel AMX").
fn is_avx512_or_amx(line: &str) -> bool {
    const AMX: [&str; 8] = [
        "ldtilecfg",
        "sttilecfg",
        "tileloadd",
        "tilestored",
        "tilezero",
        "tilerelease",
        "tdpb",
        "tdpfp16ps",
    ];
    // the mnemonic and operands follow the address's tab
    let Some(insn) = line.split('\t').nth(1) else {
        return false;
    };
    let mnemonic = insn.split_whitespace().next().unwrap_or("");
    if AMX.iter().any(|m| mnemonic.starts_with(m)) || mnemonic.starts_with("kmov") {
        return true;
    }
    if insn.contains("%zmm") {
        return true;
    }
    let bytes = insn.as_bytes();
    insn.match_indices('%').any(|(i, _)| {
        let rest = &insn[i + 1..];
        // %k0..%k7 (not %kernel-like symbols: a digit follows and then no letter)
        if rest.starts_with('k')
            && bytes.get(i + 2).is_some_and(|b| (b'0'..=b'7').contains(b))
            && !bytes.get(i + 3).is_some_and(|b| b.is_ascii_alphanumeric())
        {
            return true;
        }
        for prefix in ["xmm", "ymm"] {
            if let Some(n) = rest.strip_prefix(prefix) {
                let digits: String = n.chars().take_while(char::is_ascii_digit).collect();
                if digits.parse::<u32>().is_ok_and(|r| r >= 16) {
                    return true;
                }
            }
        }
        false
    })
}

/// Up to `limit` AVX-512/AMX instructions in `file`'s disassembly, with their addresses.
fn forbidden_instructions(file: &Path, limit: usize) -> Vec<String> {
    let mut child = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(file)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("objdump (binutils) must be installed to check the llama.cpp build");
    let mut found = Vec::new();
    let out = child.stdout.take().expect("piped");
    for line in BufReader::new(out).lines().map_while(Result::ok) {
        if is_avx512_or_amx(&line) {
            found.push(line.trim().to_string());
            if found.len() >= limit {
                break;
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    found
}

/// Every shared library under `dir`, recursively.
fn shared_libraries(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            shared_libraries(&path, out);
        } else if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".so") || n.contains(".so."))
        {
            out.push(path);
        }
    }
}

#[test]
fn the_scanner_finds_avx512_in_code_built_for_it() {
    // the check below must be able to fail: code compiled for AVX-512 is flagged, and the
    // same code compiled for AVX2 is not
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("add.c");
    std::fs::write(
        &src,
        "void add(float *a, const float *b) { for (int i = 0; i < 4096; i++) a[i] += b[i]; }\n",
    )
    .unwrap();
    let compile = |flags: &[&str], out: &str| {
        let obj = dir.path().join(out);
        let ok = Command::new("cc")
            .args(["-O3", "-c"])
            .args(flags)
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(obj)
    };
    let (Some(wide), Some(narrow)) = (
        compile(&["-mavx512f", "-mprefer-vector-width=512"], "wide.o"),
        compile(&["-mavx2", "-mfma"], "narrow.o"),
    ) else {
        // the test stack compiles llama.cpp with the same compiler: it is there
        panic!("`cc` could not compile with -mavx512f or -mavx2 (gcc 12 can both)");
    };
    assert!(!forbidden_instructions(&wide, 1).is_empty());
    assert!(forbidden_instructions(&narrow, 1).is_empty());
    assert!(is_avx512_or_amx("  4010:\ttileloadd (%rsi,%rdx,1),%tmm0"));
    assert!(is_avx512_or_amx("  4010:\tvaddps %ymm17,%ymm1,%ymm2"));
    assert!(is_avx512_or_amx("  4010:\tvmovups %ymm1,(%rax){%k1}"));
    assert!(!is_avx512_or_amx("  4010:\tvaddps %ymm15,%ymm1,%ymm2"));
}

#[test]
#[ignore = "needs the llama.cpp server of python/requirements-test.txt (make setup-test); make test runs it with --ignored"]
fn the_llama_cpp_build_has_no_avx512_or_amx_instructions() {
    let out = Command::new(python())
        .args([
            "-c",
            "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('llama_cpp').origin))",
        ])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "llama_cpp is not installed ({}); `make setup-test` builds and installs it",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let package = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let mut libraries = Vec::new();
    shared_libraries(&package, &mut libraries);
    assert!(
        !libraries.is_empty(),
        "no shared library under `{}`",
        package.display()
    );
    let mut offenders = Vec::new();
    for lib in &libraries {
        let found = forbidden_instructions(lib, 3);
        if !found.is_empty() {
            offenders.push(format!("{}:\n    {}", lib.display(), found.join("\n    ")));
        }
    }
    assert!(
        offenders.is_empty(),
        "llama.cpp was built with AVX-512 or AMX instructions, which die on a CPU without them; rebuild it portably (`rm -rf ~/.cache/autokernel/wheels .venv/.test-requirements-installed && make setup-test`):\n{}",
        offenders.join("\n")
    );
}
