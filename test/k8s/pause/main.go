// Command pause is the pod sandbox image of the test cluster scripts/k8s.sh runs, since registry.k8s.io's
// pause image cannot be pulled there: it holds the pod's namespaces by sleeping until SIGTERM or SIGINT.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
