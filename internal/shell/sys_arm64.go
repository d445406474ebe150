package shell

func sysKind(nr int64) syscallKind {
	switch nr {
	case 63, 65, 67, 69: // read, readv, pread64, preadv
		return sysRead
	case 72: // pselect6
		return sysSelect
	case 73: // ppoll
		return sysPoll
	case 22, 441: // epoll_pwait, epoll_pwait2
		return sysEpoll
	}
	return sysOther
}

// nrPselect6 is the system call readline sleeps in at a prompt.
const nrPselect6 = 72
