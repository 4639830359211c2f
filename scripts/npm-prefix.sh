# Sourced by scripts/agents.sh and scripts/mcp-servers.sh: npm packages each installed into a
# prefix of its own under "$dir" (the caller's cache outside the clone), pinned by version, once.
# The caller defines `dir` and `say`.

# One npm prefix per package and version; npm runs outside any package.json. A prefix is
# written beside its final name and moved there whole, so an interrupted install is redone.
install() { # folder package@version
  if [ ! -d "$dir/$1/node_modules" ]; then
    say "installing $2"
    rm -rf "$dir/$1.part"
    (cd "$dir" && npm install --prefix "$dir/$1.part" --no-audit --no-fund --loglevel=error "$2")
    mv "$dir/$1.part" "$dir/$1"
  fi
}
