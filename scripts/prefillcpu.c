/* prefillcpu.c: prefill of one or two attnc CPU builds in one process —
   process CPU time in the order A B B A, the outputs compared bit for bit —
   or one call's instructions counted exactly by single-stepping it under
   ptrace (any CPU level; valgrind 3.19 has no AVX-512 and virtual machines
   often no hardware counters).

   The variant is causal prefill over a paged cache, page 16, head dim 128,
   f32, bf16 or f16 (built with `attnc build --shared`; both libraries of the same
   variant, so their symbols match): one sequence of L cached positions, its
   pages in a scattered order, one thread.

     gcc -O2 -o prefillcpu scripts/prefillcpu.c -ldl
     ./prefillcpu VARIANT f32|bf16|f16 L ROUNDS a/VARIANT.so [b/VARIANT.so]
         # ROUNDS of A B B A: best and median per library, B/A
     STEP=1 HIST=ips.txt ./prefillcpu VARIANT f32 L 1 a/VARIANT.so
         # one call of the first library, single-stepped: its instruction
         # count, and every stepped address (after the mappings) in ips.txt

   Environment: QO and KVH set the variant's heads (default 32 and 8), QLEN
   the query rows (default L: q_len = kv_len; fewer put the queries at the
   end of the sequence, so most tiles are fully visible). ATTNC_CPU_LEVEL
   forces a level as for any entry. About 70 s per million stepped
   instructions on a loaded 2-core VM. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <sys/user.h>
#include <unistd.h>
typedef int32_t (*pf_t)(const void*, const int32_t*, const void*, const void*, int32_t,
  const int32_t*, const int32_t*, const int32_t*, int32_t, void*, float*);
typedef void (*snt_t)(int32_t);
static double cpu(void){struct timespec t;clock_gettime(CLOCK_PROCESS_CPUTIME_ID,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static uint64_t rs=88172645463325252ull;
static double rnd(void){rs^=rs<<13;rs^=rs>>7;rs^=rs<<17;return (double)(rs>>11)/9007199254740992.0*2-1;}
static uint16_t tobf(float f){uint32_t u;memcpy(&u,&f,4);u+=0x7fff+((u>>16)&1);return u>>16;}
static uint16_t toh(float f){_Float16 h=(_Float16)f;uint16_t u;memcpy(&u,&h,2);return u;}
static uint16_t to16(int h16,float f){return h16==2?toh(f):tobf(f);}
static int cmpd(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  if(argc<6){fprintf(stderr,"usage\n");return 2;}
  const char*var=argv[1];int bf=strcmp(argv[2],"bf16")==0?1:strcmp(argv[2],"f16")==0?2:0;int L=atoi(argv[3]);int R=atoi(argv[4]);
  int nl=argc-5; pf_t f[2]; 
  for(int i=0;i<nl;i++){void*h=dlopen(argv[5+i],RTLD_NOW|RTLD_LOCAL);if(!h){fprintf(stderr,"%s\n",dlerror());return 1;}
    char s[256];snprintf(s,256,"%s_prefill",var);f[i]=(pf_t)dlsym(h,s);
    snprintf(s,256,"%s_set_num_threads",var);snt_t st=(snt_t)dlsym(h,s);if(!f[i]||!st){fprintf(stderr,"sym\n");return 1;}st(1);}
  int H=getenv("QO")?atoi(getenv("QO")):32,KH=getenv("KVH")?atoi(getenv("KVH")):8,D=128,P=16; int np=(L+P-1)/P; size_t es=bf?2:4;
  size_t qn=(size_t)L*H*D, kn=(size_t)np*KH*P*D;
  void*q=malloc(qn*es),*k=malloc(kn*es),*v=malloc(kn*es);
  for(size_t i=0;i<qn;i++){float x=rnd()*2;if(bf)((uint16_t*)q)[i]=to16(bf,x);else((float*)q)[i]=x;}
  for(size_t i=0;i<kn;i++){float x=rnd()*2,y=rnd();if(bf){((uint16_t*)k)[i]=to16(bf,x);((uint16_t*)v)[i]=to16(bf,y);}else{((float*)k)[i]=x;((float*)v)[i]=y;}}
  int QL=getenv("QLEN")?atoi(getenv("QLEN")):L; qn=(size_t)QL*H*D; int32_t qo[2]={0,QL},kvp[2]={0,np},last[1]={L-(np-1)*P};int32_t*idx=malloc(np*4);
  for(int i=0;i<np;i++)idx[i]=i;
  for(int i=np-1;i>0;i--){int j=(int)((rnd()+1)/2*(i+1));if(j>i)j=i;int t=idx[i];idx[i]=idx[j];idx[j]=t;}
  void*o[2];float*lse[2];
  for(int i=0;i<nl;i++){posix_memalign(&o[i],4096,qn*es);memset(o[i],0,qn*es);lse[i]=calloc((size_t)QL*H,4);}

  if(getenv("STEP")){ /* single-step one call of lib A under ptrace; HIST=file writes every rip */
    pid_t pid=fork();
    if(pid==0){ptrace(PTRACE_TRACEME,0,0,0);raise(SIGSTOP);f[0](q,qo,k,v,np,kvp,idx,last,1,o[0],lse[0]);raise(SIGSTOP);_exit(0);}
    int status;long cnt=0;FILE*hist=getenv("HIST")?fopen(getenv("HIST"),"w"):NULL;
    if(hist){char mp[64],line[512];snprintf(mp,64,"/proc/%d/maps",pid);FILE*m=fopen(mp,"r");while(fgets(line,512,m))if(strstr(line,".so"))fprintf(hist,"MAP %s",line);fclose(m);}
    waitpid(pid,&status,0);ptrace(PTRACE_SINGLESTEP,pid,0,0);
    for(;;){waitpid(pid,&status,0);if(!WIFSTOPPED(status))break;if(WSTOPSIG(status)==SIGSTOP)break;cnt++;
      if(hist){struct user_regs_struct r;ptrace(PTRACE_GETREGS,pid,0,&r);fprintf(hist,"%llx\n",r.rip);}ptrace(PTRACE_SINGLESTEP,pid,0,0);}
    printf("%ld instructions\n",cnt);if(hist)fclose(hist);kill(pid,SIGKILL);return 0;}
  double *t[2];for(int i=0;i<nl;i++)t[i]=malloc(sizeof(double)*2*R);int n[2]={0,0};
  for(int i=0;i<nl;i++){int rc=f[i](q,qo,k,v,np,kvp,idx,last,1,o[i],lse[i]);if(rc){fprintf(stderr,"rc %d\n",rc);return 1;}}
  if(nl==2){if(memcmp(o[0],o[1],qn*es)||memcmp(lse[0],lse[1],(size_t)QL*H*4)){size_t d=0;for(size_t i=0;i<qn*es;i++)d+=((char*)o[0])[i]!=((char*)o[1])[i];printf("OUTPUTS DIFFER (%zu bytes)\n",d);}else printf("outputs bit-identical\n");}
  for(int r=0;r<R;r++){int ord[4]={0,1,1,0};for(int j=0;j<(nl==2?4:1);j++){int i=ord[j];double a=cpu();f[i](q,qo,k,v,np,kvp,idx,last,1,o[i],lse[i]);t[i][n[i]++]=cpu()-a;}}
  double fl=2.0*2*D*(double)L*(L+1)/2*H;
  for(int i=0;i<nl;i++){qsort(t[i],n[i],8,cmpd);printf("lib%c best %.3f ms  median %.3f ms  (%.1f GFLOP/s best)\n",'A'+i,t[i][0]*1e3,t[i][n[i]/2]*1e3,fl/t[i][0]/1e9);}
  if(nl==2)printf("B/A best %.4f median %.4f\n",t[1][0]/t[0][0],t[1][n[1]/2]/t[0][n[0]/2]);
  return 0;}
