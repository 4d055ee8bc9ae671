// Package tlsconfig builds the TLS settings of the sidecar's gRPC server
// (Server) and of its xDS client (Client) from PEM files, and keeps them in
// step with the files.
//
// Certificates are rotated in place: cert-manager rewrites a Secret and the
// kubelet swaps the volume's ..data symlink. So every handshake first stats
// the files (a few syscalls, much less than the handshake's own crypto),
// and loads them again when one changed; the connection uses what was
// loaded, and existing connections keep theirs. Each load is logged. A
// changed file that cannot be used (half-written, a key that does not
// match) is logged once per change, and the last good certificates keep
// serving. At start, by contrast, a file that cannot be used is an error
// (*FileError): TLS that was asked for never falls back to plaintext.
package tlsconfig
