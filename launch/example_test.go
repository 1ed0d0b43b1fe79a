package launch_test

import (
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/posttrainllm/posttrainllm/launch"
)

// A program that trains data-parallel starts N ranks of its own binary:
// the parent (not InRank) calls Run, which runs this program again with
// each rank's environment; each rank (InRank) calls Join and gets its
// group, whose size and rank say which rows it trains on. Rank 0 alone
// should print and write files.
func Example() {
	if !launch.InRank() {
		err := launch.Run(launch.Config{
			Nproc:  2,
			Args:   os.Args[1:],
			Stdout: os.Stdout,
			Stderr: os.Stderr,
		})
		var ee *launch.ExitError
		switch {
		case errors.As(err, &ee):
			os.Exit(ee.Code)
		case err != nil:
			log.Fatal(err)
		}
		return
	}
	group, err := launch.Join()
	if err != nil {
		log.Fatal(err)
	}
	// Pass group to the training step (pretrain.Trainer.Group) so that the
	// ranks average their gradients and apply the same update.
	fmt.Printf("rank %d of %d\n", group.Rank(), group.Size())
}
