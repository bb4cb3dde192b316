//go:build !unix

package netpoll

import "errors"

// Without Unix descriptors there is no Sock (Adopt fails), and these are
// never called.

func ReadFD(fd int, p []byte) (int, bool, error)  { return 0, false, errors.ErrUnsupported }
func WriteFD(fd int, p []byte) (int, bool, error) { return 0, false, errors.ErrUnsupported }
func closeFD(fd int)                              {}
func shutdownWrite(fd int) error                  { return errors.ErrUnsupported }
