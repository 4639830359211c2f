// The app's Tauri commands, by name. build.rs declares exactly these to Tauri's ACL (so each
// gets an `allow-<name>` permission) and the capability test compares them with the
// capability files. Shared with `include!` because a build script cannot use the crate.
pub(crate) const COMMANDS: &[&str] = &["node_url"];
