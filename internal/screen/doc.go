// Package screen turns the raw byte stream a program writes to its terminal
// into something a person (or a model) reads: [Clean] and [Text] give the
// output of a command as text with escape sequences removed and overwrites
// applied (the `output` of an exec result), and [Emulator] keeps the screen
// a terminal would display now (GET /v1/sessions/{id}/screen).
//
// It must never block its writer nor talk back to the program: it only
// reads the stream. The emulator answers terminal queries (cursor position,
// device attributes) into a pipe it drains and discards itself, so a query
// in the output can neither stall the PTY read loop nor inject bytes into
// the program's input.
package screen
