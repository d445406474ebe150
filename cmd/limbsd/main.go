// Command limbsd is the in-sandbox daemon of limbs: it owns the shell
// sessions and the file API of one sandbox and serves them over HTTP on a
// Unix socket (docs/api.md).
package main

func main() {}
