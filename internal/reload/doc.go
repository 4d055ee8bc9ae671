// Package reload keeps the served rules in step with their files: it loads
// them again when the files change, Kubernetes ConfigMap volumes included,
// or when asked (SIGHUP), and keeps the last good rules serving when a load
// fails.
package reload
