from starpo_countdown import main

if __name__ == "__main__":
    main()
