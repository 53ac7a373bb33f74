//! No import cycles between the modules of any crate of the workspace (docs/architecture.md):
//! each module file is a node; each `crate::…` or `super::…` path in its code (comments and
//! the trailing `#[cfg(test)]` module aside) is an edge to the module that path names, a
//! name the crate root re-exports counting as its defining module.
//!
//! A lexical scan, not a parser: our own code writes its paths plainly, and `syn` would be a
//! dependency for this one test. What the scan misses (a path split by a comment) errs
//! towards no edge; `a_cycle_is_found` shows it does find one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's modules: path (`["run", "keep"]`, the root `[]`) → source text.
type Modules = BTreeMap<Vec<String>, String>;

/// Reads the crate rooted at `root_file` (`lib.rs` or `main.rs`) and the module files its
/// `mod` declarations name, recursively.
fn modules(root_file: &Path) -> Modules {
    let mut out = Modules::new();
    let mut stack = vec![(Vec::<String>::new(), root_file.to_path_buf())];
    while let Some((path, file)) = stack.pop() {
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        // children of `a.rs` live in `a/`, of `mod.rs`, `lib.rs` and `main.rs` beside them
        let stem = file.file_stem().unwrap().to_string_lossy().to_string();
        let dir: PathBuf = if path.is_empty() || stem == "mod" {
            file.parent().unwrap().to_path_buf()
        } else {
            file.parent().unwrap().join(&stem)
        };
        for line in code(&text).lines() {
            let line = line.trim();
            let decl = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("pub(crate) mod "))
                .or_else(|| line.strip_prefix("mod "));
            let Some(name) = decl.and_then(|d| d.strip_suffix(';')) else {
                continue;
            };
            let child = [
                dir.join(format!("{name}.rs")),
                dir.join(name).join("mod.rs"),
            ]
            .into_iter()
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("module `{name}` of {} has no file", file.display()));
            let mut child_path = path.clone();
            child_path.push(name.to_string());
            stack.push((child_path, child));
        }
        out.insert(path, text);
    }
    out
}

/// The code of a file: without comment lines and without the trailing test module.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod tests"))
        {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The paths after each `crate::` and `super::` in `code`, braces expanded one level
/// (`crate::{a, b::c}` gives `a` and `b::c`); `super` paths made absolute from `module`.
fn paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", module[..module.len().saturating_sub(1)].to_vec()),
    ] {
        for (at, _) in code.match_indices(prefix) {
            // `foo_crate::` is another crate's path, not ours
            if code[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
            {
                continue;
            }
            let rest = &code[at + prefix.len()..];
            let items: Vec<&str> = match rest.strip_prefix('{') {
                Some(list) => list[..list.find('}').unwrap_or(list.len())]
                    .split(',')
                    .collect(),
                None => vec![rest],
            };
            for item in items {
                let segments: Vec<String> = item
                    .trim()
                    .split("::")
                    .map(|s| {
                        s.chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect::<String>()
                    })
                    .take_while(|s| !s.is_empty())
                    .collect();
                let mut full = base.clone();
                full.extend(segments);
                out.push(full);
            }
        }
    }
    out
}

/// The root's re-exports: name → the module path it comes from (`pub use run::{A, B};`).
fn reexports(root: &str, modules: &Modules) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let code = code(root);
    for stmt in code.split(';') {
        let Some(rest) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let (path, names) = match rest.find('{') {
            Some(i) => (
                &rest[..i],
                rest[i + 1..]
                    .trim_end_matches('}')
                    .split(',')
                    .collect::<Vec<_>>(),
            ),
            None => match rest.rfind("::") {
                Some(i) => (&rest[..i + 2], vec![&rest[i + 2..]]),
                None => continue,
            },
        };
        let module: Vec<String> = path
            .split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if !modules.contains_key(&module[..1.min(module.len())].to_vec()) {
            continue; // another crate's item
        }
        for name in names {
            let name = name.trim().rsplit(" as ").next().unwrap_or("").trim();
            if !name.is_empty() {
                out.insert(name.to_string(), module.clone());
            }
        }
    }
    out
}

/// The module each path of `module`'s code depends on: the longest prefix that is a
/// module, or for a root name, the module the root re-exports it from.
fn edges(modules: &Modules) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let root_exports = reexports(&modules[&Vec::new()], modules);
    let mut graph = BTreeMap::new();
    for (module, text) in modules {
        let mut deps = BTreeSet::new();
        for path in paths(&code(text), module) {
            let mut target = (0..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| modules.contains_key(p))
                .unwrap_or_default();
            if target.is_empty() {
                if let Some(m) = path.first().and_then(|n| root_exports.get(n)) {
                    target = (0..=m.len())
                        .rev()
                        .map(|n| m[..n].to_vec())
                        .find(|p| modules.contains_key(p))
                        .unwrap_or_default();
                }
            }
            // a module using itself or its own descendants is no dependency on another
            if target.starts_with(module) || (module.is_empty() && target.is_empty()) {
                continue;
            }
            // a parent declares its children: only the child's use of its ancestors counts
            deps.insert(target);
        }
        graph.insert(module.clone(), deps);
    }
    graph
}

/// One cycle of the graph, as the modules along it, if there is one.
fn find_cycle(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<String>> {
    fn visit(
        node: &Vec<String>,
        graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        stack: &mut Vec<Vec<String>>,
        done: &mut BTreeSet<Vec<String>>,
    ) -> Option<Vec<String>> {
        if let Some(i) = stack.iter().position(|n| n == node) {
            let mut cycle: Vec<String> = stack[i..].iter().map(|p| name(p)).collect();
            cycle.push(name(node));
            return Some(cycle);
        }
        if !done.insert(node.clone()) {
            return None;
        }
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

fn name(path: &[String]) -> String {
    if path.is_empty() {
        "(crate root)".into()
    } else {
        path.join("::")
    }
}

#[test]
fn no_crate_of_the_workspace_has_an_import_cycle() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let roots = [
        "src/lib.rs",
        "src/main.rs",
        "autokernel-core/src/lib.rs",
        "autokernel-bench/src/lib.rs",
        "autokernel-profiler/src/lib.rs",
        "autokernel-agent/src/lib.rs",
        "autokernel-vcs/src/lib.rs",
    ];
    let mut cycles = Vec::new();
    for root in roots {
        let graph = edges(&modules(&repo.join(root)));
        assert!(graph.len() > 1, "{root}: no modules found");
        if let Some(cycle) = find_cycle(&graph) {
            cycles.push(format!("{root}: {}", cycle.join(" -> ")));
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn a_cycle_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let write = |p: &str, t: &str| std::fs::write(dir.path().join(p), t).unwrap();
    write("lib.rs", "mod a;\nmod b;\nmod c;\npub use c::Thing;\n");
    write(
        "a.rs",
        "// crate::c::x in a comment is no edge\nuse crate::b::f;\n",
    );
    write("b.rs", "use crate::{c::g, Thing};\n");
    write(
        "c.rs",
        "pub struct Thing;\nfn g() { crate::a::h() }\n#[cfg(test)]\nmod tests { use crate::b; }\n",
    );
    let graph = edges(&modules(&dir.path().join("lib.rs")));
    let deps = |m: &str| {
        graph[&vec![m.to_string()]]
            .iter()
            .map(|p| name(p))
            .collect::<Vec<_>>()
    };
    assert_eq!(deps("a"), ["b"]);
    assert_eq!(deps("b"), ["c"], "a root re-export counts as its module");
    assert_eq!(deps("c"), ["a"], "the test module is left out");
    let cycle = find_cycle(&graph).expect("a -> b -> c -> a");
    assert_eq!(cycle.len(), 4, "{cycle:?}");
    // without c's call, no cycle
    write("c.rs", "pub struct Thing;\nfn g() {}\n");
    assert_eq!(
        find_cycle(&edges(&modules(&dir.path().join("lib.rs")))),
        None
    );
}
