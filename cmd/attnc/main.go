// Command attnc compiles paged-KV-cache attention specs (.attn files) into
// kernels, headers and a manifest, and checks, explains and verifies them.
// The commands live in package cli; run `attnc help` for the list.
package main

import "github.com/attnc/attnc/cli"

func main() { cli.Main() }
