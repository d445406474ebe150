package shell

func sysKind(nr int64) syscallKind {
	switch nr {
	case 0, 17, 19, 295: // read, pread64, readv, preadv
		return sysRead
	case 23, 270: // select, pselect6
		return sysSelect
	case 7, 271: // poll, ppoll
		return sysPoll
	case 232, 281, 441: // epoll_wait, epoll_pwait, epoll_pwait2
		return sysEpoll
	}
	return sysOther
}

// nrPselect6 is the system call readline sleeps in at a prompt.
const nrPselect6 = 270
