// Command nonewprivs is the offline stand-in for the nnp program of
// registry.k8s.io/e2e-test-images/nonewprivs:1.3. The image installs it
// setuid root (mode 04755), so it prints "Effective uid: 0" when the
// container may gain privileges and "Effective uid: <RunAsUser>" when
// no_new_privs is set, which is what critest's NoNewPrivs specs compare.
//
// It is built static by critest/images/cmd/mkimages; nothing imports it.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Printf("Effective uid: %d\n", os.Geteuid())
}
