; Hand-written kernels for cpurt's tests.
@msg.ok = private unnamed_addr constant [3 x i8] c"ok\00"
@msg.bad = private unnamed_addr constant [10 x i8] c"bad input\00"
@threads = global i32 0

; add sums n ints at p.
define i32 @add(i32* %p, i32 %n) {
entry:
  %pos = icmp sgt i32 %n, 0
  br i1 %pos, label %loop, label %done
loop:
  %i = phi i32 [ 0, %entry ], [ %i1, %loop ]
  %s = phi i32 [ 0, %entry ], [ %s1, %loop ]
  %ix = sext i32 %i to i64
  %q = getelementptr inbounds i32, i32* %p, i64 %ix
  %x = load i32, i32* %q
  %s1 = add i32 %s, %x
  %i1 = add i32 %i, 1
  %c = icmp slt i32 %i1, %n
  br i1 %c, label %loop, label %done
done:
  %r = phi i32 [ 0, %entry ], [ %s1, %loop ]
  ret i32 %r
}

; many checks that arguments past the sixth (on the stack) arrive: it returns
; sum_i (i+1)*a_i over ten i32s plus the int at p.
define i32 @many(i32 %a0, i32 %a1, i32 %a2, i32 %a3, i32 %a4, i32 %a5, i32 %a6, i32 %a7, i32 %a8, i32 %a9, i32* %p) {
  %m1 = mul i32 %a1, 2
  %m2 = mul i32 %a2, 3
  %m3 = mul i32 %a3, 4
  %m4 = mul i32 %a4, 5
  %m5 = mul i32 %a5, 6
  %m6 = mul i32 %a6, 7
  %m7 = mul i32 %a7, 8
  %m8 = mul i32 %a8, 9
  %m9 = mul i32 %a9, 10
  %s1 = add i32 %a0, %m1
  %s2 = add i32 %s1, %m2
  %s3 = add i32 %s2, %m3
  %s4 = add i32 %s3, %m4
  %s5 = add i32 %s4, %m5
  %s6 = add i32 %s5, %m6
  %s7 = add i32 %s6, %m7
  %s8 = add i32 %s7, %m8
  %s9 = add i32 %s8, %m9
  %x = load i32, i32* %p
  %r = add i32 %s9, %x
  ret i32 %r
}

; scale writes 2*x[i] to y[i] for n floats.
define i32 @scale(float* %x, float* %y, i32 %n) {
entry:
  %neg = icmp slt i32 %n, 0
  br i1 %neg, label %bad, label %check
bad:
  ret i32 -1
check:
  %pos = icmp sgt i32 %n, 0
  br i1 %pos, label %loop, label %done
loop:
  %i = phi i32 [ 0, %check ], [ %i1, %loop ]
  %ix = sext i32 %i to i64
  %px = getelementptr inbounds float, float* %x, i64 %ix
  %py = getelementptr inbounds float, float* %y, i64 %ix
  %v = load float, float* %px
  %v2 = fmul float %v, 2.0
  store float %v2, float* %py
  %i1 = add i32 %i, 1
  %c = icmp slt i32 %i1, %n
  br i1 %c, label %loop, label %done
done:
  ret i32 0
}

define i8* @t_strerror(i32 %code) {
  %ok = icmp eq i32 %code, 0
  %s = select i1 %ok, i8* getelementptr ([3 x i8], [3 x i8]* @msg.ok, i64 0, i64 0), i8* getelementptr ([10 x i8], [10 x i8]* @msg.bad, i64 0, i64 0)
  ret i8* %s
}

define void @t_set_num_threads(i32 %n) {
  store i32 %n, i32* @threads
  ret void
}

define i32 @t_get_num_threads() {
  %n = load i32, i32* @threads
  ret i32 %n
}
