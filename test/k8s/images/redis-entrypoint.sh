#!/bin/sh
# As the official redis image for the commands deploy/k8s and docker-compose.yml give it: arguments that start
# with a flag (or a .conf file) are redis-server's, and protected mode is off, as that image compiles it (else
# Redis without a password refuses every client that is not on loopback, which in a pod is every client).
case "$1" in
-* | *.conf) set -- redis-server "$@" ;;
esac
if [ "$1" = redis-server ]; then
	case " $* " in
	*" --protected-mode "*) ;;
	*) set -- "$@" --protected-mode no ;;
	esac
fi
exec "$@"
