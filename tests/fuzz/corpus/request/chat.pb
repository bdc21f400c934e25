"M

system	Be brief.

userWhat is 2+2?

	assistant4

userAnd 3+3?0