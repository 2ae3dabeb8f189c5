// Command etcd is the etcd server of the local test stack, built from the
// Go module proxy. `go install go.etcd.io/etcd/v3@...` does not work because
// etcd's root go.mod has replace directives, so this module requires
// go.etcd.io/etcd/server/v3 and does what etcd's own main.go does.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
